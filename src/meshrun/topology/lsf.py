"""IBM LSF (jsrun): hosts from the file named by ``LSB_DJOB_RANKFILE`` (one line per slot; the
first line is the launch host), node rank = position of this host among the compute
hosts, master = the first compute host, port derived from ``LSB_JOBID``.

The rank file's text is read once by :mod:`meshrun.facts` and handed in, so this
stays pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import UsageError
from .base import Claims, HostInfo, Sourced, derived_port

# The variables detect() reads (see meshrun.topology: every list of platform variables
# is derived from these).
READS = ("LSB_JOBID", "LSB_DJOB_RANKFILE")


def detect(env: Mapping[str, str], host: HostInfo) -> Claims | None:
    job = env.get("LSB_JOBID", "").strip()
    rankfile = env.get("LSB_DJOB_RANKFILE", "").strip()
    if not job or not rankfile:
        return None
    claims = Claims(platform="lsf")
    text = host.files.get(rankfile)
    if text is None:
        raise UsageError(f"LSB_DJOB_RANKFILE={rankfile} cannot be read", subject="LSB_DJOB_RANKFILE",
                         hint="run meshrun inside the LSF job, or pass --nnodes/--node-rank/"
                              "--master-addr", code="lsf-rankfile-unreadable")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    hosts = list(dict.fromkeys(lines[1:])) or lines[:1]
    claims.nnodes = Sourced(len(hosts), f"distinct compute hosts in LSB_DJOB_RANKFILE={rankfile}")
    claims.master_addr = Sourced(hosts[0], "first compute host in LSB_DJOB_RANKFILE", False)
    short = host.hostname.split(".")[0]
    matches = [i for i, h in enumerate(hosts) if h == host.hostname or h.split(".")[0] == short]
    if matches:
        claims.node_rank = Sourced(matches[0], f"position of {host.hostname} in LSB_DJOB_RANKFILE")
    claims.master_port = derived_port(job, "LSB_JOBID")
    claims.run_id = Sourced(f"lsf-{job}", "LSB_JOBID", False)
    return claims

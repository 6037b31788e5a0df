"""``meshrun doctor``: check this node before GPU hours are spent.

Local checks (this node only; nothing is started):

==========================  =====================================================
code                        what
==========================  =====================================================
torch                       torch imports; its version, CUDA and NCCL versions
gpus                        GPUs visible against the processes planned
disk-space                  free space where logs and checkpoints go
                            (error under 1 GiB, warning under 10 GiB)
master-dns                  the master address resolves
master-port                 on node 0: the port is free to bind; elsewhere: it
                            answers (a warning only: node 0 may not be up yet)
net-*/nccl-*/... (lint)     the environment lint of :mod:`meshrun.nccl.lint`
preflight-mismatch          with ``--all-nodes``: the cross-node preflight, run
                            with the other nodes' ``meshrun doctor --all-nodes``
==========================  =====================================================

JSON (``--json``): ``{"findings": [{"code", "severity", "subject", "message",
"hint"}]}``. Exit code 3 when any finding is an error, else 0.
"""

from __future__ import annotations

import shutil
import socket

from ..errors import Finding
from ..plan import LaunchPlan
from ..topology.address import join_host_port
from .checks import nearest_existing, not_a_folder

GIB = 1 << 30


Check = Finding  # a doctor check is a finding, in the one diagnostic shape


def local_checks(plan: LaunchPlan, env: dict, *, checkpoint_dir: str = "checkpoints",
                 token: str | None = None) -> list[Check]:
    out = [*_torch(), _gpus(plan), *_disk(plan, checkpoint_dir), _dns(plan)]
    port = _port(plan)
    if port is not None:
        out.append(port)
    out += _control_plane(plan, token)
    out += _lint(plan, env)
    return out


def _control_plane(plan: LaunchPlan, token: str | None) -> list[Check]:
    """Whether the job's control plane is signed (docs/security.md): a warning when it is not
    and node 0's address is not loopback."""
    from .store import control_plane_line

    line = control_plane_line(plan, token)
    if not line:
        return []
    if token is not None:
        return [Check("control-plane-signed", "info", "MESHRUN_JOB_TOKEN", line)]
    what, _, fix = line.removeprefix("warning: ").partition("; set ")
    return [Check("control-plane-unauthenticated", "warning", "MESHRUN_JOB_TOKEN", what,
                  "set " + fix)]


def _torch() -> list[Check]:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - ImportError or a broken install
        return [Check("torch", "error", "torch", f"torch does not import: {exc}",
                      "pip install 'torch>=2.4' in this environment")]
    cuda = torch.version.cuda or "none (CPU build)"
    nccl = "none"
    try:
        if torch.cuda.is_available():
            version = torch.cuda.nccl.version()
            nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    except Exception:  # noqa: BLE001
        nccl = "unknown"
    return [Check("torch", "info", "torch",
                  f"torch {torch.__version__}, CUDA {cuda}, NCCL {nccl}")]


def _gpus(plan: LaunchPlan) -> Check:
    if plan.device == "cuda":
        return Check("gpus", "info", "CUDA_VISIBLE_DEVICES",
                     f"{len(plan.visible_devices)} GPU(s) for {plan.nproc_per_node} process(es): "
                     f"{', '.join(plan.visible_devices)}"
                     + (f" ({plan.gpu_names[0]})" if plan.gpu_names else ""))
    return Check("gpus", "info", "--nproc-per-node",
                 f"no GPU visible: {plan.nproc_per_node} CPU process(es) with gloo")


def _disk(plan: LaunchPlan, checkpoint_dir: str) -> list[Check]:
    out = []
    for what, path in (("logs", plan.log_dir), ("checkpoints", checkpoint_dir)):
        probe = nearest_existing(path)
        wrong = not_a_folder(path, probe)
        if wrong:
            flag = "--log-dir" if what == "logs" else "--checkpoint-dir"
            out.append(Check("disk-space", "error", path, f"the folder for {what} ({path}) "
                             f"{wrong}", f"point {flag} at a folder (it is made if missing)"))
            continue
        free = shutil.disk_usage(probe).free
        severity = "error" if free < GIB else "warning" if free < 10 * GIB else "info"
        out.append(Check("disk-space", severity, path,
                         f"{free / GIB:.1f} GiB free for {what} ({path})",
                         "" if severity == "info" else
                         f"free space on {probe} or point --{'log-dir' if what == 'logs' else 'checkpoint-dir'} elsewhere"))
    return out


def _dns(plan: LaunchPlan) -> Check:
    try:
        infos = socket.getaddrinfo(plan.master_addr, None)
    except socket.gaierror as exc:
        return Check("master-dns", "error", "--master-addr",
                     f"the master address {plan.master_addr} does not resolve ({exc.strerror})",
                     "check the name (on Kubernetes: the headless Service), or use node 0's IP")
    return Check("master-dns", "info", "--master-addr",
                 f"{plan.master_addr} resolves to {infos[0][4][0]}")


def _port(plan: LaunchPlan) -> Check | None:
    if not plan.master_port:
        return None  # single node, a free port is chosen at launch
    where = join_host_port(plan.master_addr, plan.master_port)
    if plan.is_master:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("", plan.master_port))
            except OSError as exc:
                return Check("master-port", "error", "--master-port",
                             f"port {plan.master_port} is taken on this host (node 0): "
                             f"{exc.strerror}",
                             "stop what holds it (ss -ltnp) or choose another --master-port")
        return Check("master-port", "info", "--master-port",
                     f"port {plan.master_port} is free on this host (node 0)")
    try:
        with socket.create_connection((plan.master_addr, plan.master_port), timeout=2):
            pass
    except OSError as exc:
        return Check("master-port", "warning", "--master-port",
                     f"nothing answers at {where} yet ({exc.strerror or exc})",
                     "start node 0 first, or check firewalls between the nodes")
    return Check("master-port", "info", "--master-port", f"{where} answers")


def _lint(plan: LaunchPlan, env: dict) -> list[Check]:
    from ..facts import net as netfacts
    from ..nccl import lint_env

    facts = netfacts.collect(plan.master_addr, plan.master_port, env=env)
    return list(lint_env(env, facts))


def from_preflight(verdict) -> list[Check]:
    """The cross-node preflight's verdict as findings."""
    from .preflight import MUST_MATCH

    out = [Check("preflight-mismatch", "error", f"node {d.node_rank}",
                 f"node {d.node_rank} ({verdict.hosts.get(d.node_rank, '?')}) differs from "
                 f"node 0 in {MUST_MATCH.get(d.field, d.field)}: {d.theirs} vs {d.ours}",
                 "run the same code and environment on every node")
           for d in verdict.differences]
    out += [Check("clock-skew", "warning", "clock", w, "run NTP/chrony") for w in verdict.warnings]
    if verdict.ok:
        out.append(Check("preflight", "info", "nodes",
                         f"{len(verdict.hosts)} nodes agree on code, versions and devices"))
    return out

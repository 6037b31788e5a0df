"""Host facts, collected once per command: hostname, GPUs, files platforms point to.

This is the only part of planning that looks at the machine. GPUs come from
``nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits``
(found on the ``PATH`` of the environment handed in, so tests put a stand-in
first on ``PATH``). ``nvidia-smi`` lists every GPU of the host whatever
``CUDA_VISIBLE_DEVICES`` says; the planner applies that variable.

No torch import: ``meshrun plan`` must stay fast.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..topology.base import HostInfo

NVIDIA_SMI_QUERY = ("--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits")


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    memory_mib: int = 0


@dataclass(frozen=True)
class HostFacts:
    hostname: str = "localhost"
    gpus: tuple[Gpu, ...] = ()
    # Why no GPU list could be read although nvidia-smi exists (driver missing, ...).
    gpu_error: str = ""
    files: Mapping[str, str] = field(default_factory=dict)
    # meshrun.facts.net.NetFacts, collected once the master address is known (None: not yet).
    net: Any = None
    cpus: int = 1  # CPUs this process may run on (its affinity mask)

    def host_info(self) -> HostInfo:
        return HostInfo(hostname=self.hostname, files=self.files)


def collect(env: Mapping[str, str], *, timeout: float = 20.0) -> HostFacts:
    """Look at this host once: hostname, GPUs, platform files named by ``env``."""
    gpus, error = query_gpus(env, timeout=timeout)
    files: dict[str, str] = {}
    rankfile = env.get("LSB_DJOB_RANKFILE", "").strip()
    if rankfile:
        try:
            with open(rankfile, encoding="utf-8", errors="replace") as handle:
                files[rankfile] = handle.read()
        except OSError:
            pass  # the LSF detector reports the unreadable file with a fix
    return HostFacts(hostname=socket.gethostname(), gpus=gpus, gpu_error=error, files=files,
                     cpus=usable_cpus())


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; os.cpu_count() elsewhere)."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def query_gpus(env: Mapping[str, str], *, timeout: float = 20.0) -> tuple[tuple[Gpu, ...], str]:
    """GPUs from nvidia-smi: (gpus, "") on success, ((), reason) when nvidia-smi fails,
    ((), "") when there is no nvidia-smi at all (a CPU host)."""
    exe = shutil.which("nvidia-smi", path=env.get("PATH"))
    if exe is None:
        return (), ""
    try:
        done = subprocess.run([exe, *NVIDIA_SMI_QUERY], capture_output=True, text=True,
                              timeout=timeout, env=dict(env))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return (), f"nvidia-smi could not run: {exc}"
    if done.returncode != 0:
        first = (done.stdout + done.stderr).strip().splitlines()
        return (), f"nvidia-smi failed (exit {done.returncode}): {first[0] if first else ''}"
    try:
        return parse_gpu_csv(done.stdout), ""
    except ValueError as exc:
        return (), f"nvidia-smi printed something unexpected: {exc}"


def parse_gpu_csv(text: str) -> tuple[Gpu, ...]:
    """Parse ``index, uuid, name, memory.total`` lines (``noheader,nounits``)."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [part.strip() for part in line.split(",")]
        if len(parts) < 3:
            raise ValueError(f"line {line!r}")
        memory = parts[3] if len(parts) > 3 else "0"
        gpus.append(Gpu(index=int(parts[0]), uuid=parts[1], name=parts[2],
                        memory_mib=int(memory) if memory.isdigit() else 0))
    return tuple(gpus)

"""Fakes shared by the unit tests: GPU lists, host facts, a stand-in ``nvidia-smi``.

Imported as ``unit_fakes`` (pytest puts tests/unit on sys.path for the modules in it).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from helpers import neutral

from meshrun.facts import Gpu, HostFacts
from meshrun.plan import make_plan
from meshrun.topology import Flags

H100 = "NVIDIA H100 80GB HBM3"


def gpu_uuid(index: int) -> str:
    """A UUID whose first hex digit is the index, so ``GPU-<index>`` is a unique prefix."""
    return f"GPU-{index}aaaaaaa-bbbb-cccc-dddd-eeeeeeeeeee{index}"


def gpus(count: int) -> tuple[Gpu, ...]:
    return tuple(Gpu(index=i, uuid=gpu_uuid(i), name=H100, memory_mib=81559)
                 for i in range(count))


CPU_HOST = HostFacts(hostname="node-a", gpus=())
GPU8_HOST = HostFacts(hostname="node-a", gpus=gpus(8))


def plan(env: dict | None = None, flags: Flags | None = None, facts: HostFacts | None = None,
         command=None):
    """make_plan with neutral defaults: an empty environment, no flags, a CPU host."""
    return make_plan(env or {}, flags or Flags(), facts or CPU_HOST, command)


# --- stand-in nvidia-smi ---------------------------------------------------------------------
# Only shell builtins (echo, exit): the tests' PATH holds nothing but this script's folder.

GPU_CSV_SCRIPT = "#!/bin/sh\n" + "".join(
    f'echo "{i}, {gpu_uuid(i)}, {H100}, 81559"\n' for i in range(8))

FAILING_SCRIPT = ("#!/bin/sh\n"
                  "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                  "driver. Make sure that the latest NVIDIA driver is installed and running.\"\n"
                  "exit 9\n")

GARBAGE_SCRIPT = "#!/bin/sh\necho 'No devices were found'\n"


def write_nvidia_smi(folder: Path, script: str) -> Path:
    """Write ``script`` as ``folder/nvidia-smi`` (executable) and return the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "nvidia-smi"
    exe.write_text(script)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


def neutral_env(path: Path, **extra: str) -> dict[str, str]:
    """os.environ without any platform variable, PATH = only ``path``, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not neutral(k)}
    env["PATH"] = str(path)
    env.update(extra)
    return env

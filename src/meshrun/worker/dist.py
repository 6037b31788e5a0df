"""``meshrun.init_distributed()``: the process group in one call, from whatever launched you.

A training script needs no boilerplate::

    import meshrun
    import torch

    info = meshrun.init_distributed()          # RankInfo(rank=3, world_size=4, ...)
    model = MyModel().to(info.device)
    if info.is_main:
        print(f"training on {info.world_size} processes, {info.nnodes} node(s)")

It works the same under ``meshrun run`` / ``meshrun simulate``, under plain
``torchrun``, and as a single process started with ``python train.py``.

What it reads (all optional together; see "half-set" below)
-----------------------------------------------------------
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``
    torchrun's variables (meshrun's workers get them too). The process group
    joins through ``env://``, i.e. the store at ``MASTER_ADDR:MASTER_PORT``.
``MESHRUN_BACKEND``
    the plan's backend (``gloo`` on CPU, ``nccl`` on GPU). Without it:
    ``nccl`` when CUDA is available, else ``gloo``.
``MESHRUN_PG_TIMEOUT``
    the process-group timeout in seconds (collectives that take longer fail).
    Without it, torch's default.
``MESHRUN_NODE_RANK``, ``MESHRUN_NNODES`` (else ``GROUP_RANK``)
    the node facts; without them they are derived as ``rank // local_world_size``
    and ``world_size // local_world_size``.

Precedence: an argument passed to :func:`init_distributed` beats the variable,
and a warning says so when the two differ.

With none of the rank variables set the script runs as one process: world
size 1, a private TCP store on a free loopback port (``MASTER_*`` are then
ignored), unless an MPI launcher says it started several copies
(``OMPI_COMM_WORLD_SIZE``, ``PMI_SIZE``, ``PMIX_SIZE`` > 1): each would train
alone, so that is an error. With some but not all of them set (a platform's node variables
``RANK``/``WORLD_SIZE`` reaching a script started without a launcher, say) it
stops with one line naming what is missing and how to fix it.

Device: with CUDA available and a backend other than ``gloo``, the device is
``cuda:LOCAL_RANK`` and it becomes the current CUDA device; else ``cpu``.

Idempotent: a second call returns the same :class:`RankInfo`; a process group
that something else initialised is described, not re-created.

Errors: by default a bad environment prints ``meshrun: error: ...; fix: ...``
to stderr and exits with status 2 (one line per process, no traceback). Pass
``exit_on_error=False`` to get the :class:`meshrun.errors.UsageError` instead.

This module imports torch only inside :func:`init_distributed`.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    import torch

RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
STORE_VARS = ("MASTER_ADDR", "MASTER_PORT")
MPI_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE")
_LAUNCH_HINT = ("start it with 'meshrun run -- SCRIPT' or torchrun, which set RANK, WORLD_SIZE, "
                "LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT; or unset them all "
                "to run as a single process")


@dataclass(frozen=True)
class RankInfo:
    """Where this process stands in the job. Returned by :func:`init_distributed`.

    ``device`` is a ``torch.device`` (``cuda:<local_rank>`` or ``cpu``); ``is_main``
    is true on global rank 0 only (print, write metrics and checkpoints' extras there).
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    nnodes: int
    device: Any
    backend: str
    is_main: bool


@dataclass(frozen=True)
class RankEnv:
    """The rank facts read from an environment (pure: see :func:`read_env`)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    nnodes: int
    single: bool                 # no launcher: one process with a private store
    backend: str | None          # MESHRUN_BACKEND, if set
    timeout_s: float | None      # MESHRUN_PG_TIMEOUT, if set


def _int(env: Mapping[str, str], name: str, minimum: int = 0) -> int:
    raw = env[name].strip()
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"{name}={env[name]!r} is not a whole number", subject=name,
                         hint=f"set {name} to an integer >= {minimum}",
                         code="rank-env-bad-number") from None
    if value < minimum:
        raise UsageError(f"{name}={value} is below {minimum}", subject=name,
                         hint=f"set {name} to an integer >= {minimum}", code="rank-env-bad-number")
    return value


def read_env(env: Mapping[str, str]) -> RankEnv:
    """Read and check the rank variables of ``env`` (no torch, no side effects).

    Raises :class:`UsageError` when the variables are half-set or inconsistent.
    """
    backend = env.get("MESHRUN_BACKEND", "").strip() or None
    timeout_s = None
    if env.get("MESHRUN_PG_TIMEOUT", "").strip():
        raw = env["MESHRUN_PG_TIMEOUT"].strip()
        try:
            timeout_s = float(raw)
        except ValueError:
            timeout_s = -1.0
        if not timeout_s > 0:
            raise UsageError(f"MESHRUN_PG_TIMEOUT={raw!r} is not a positive number of seconds",
                             subject="MESHRUN_PG_TIMEOUT",
                             hint="set MESHRUN_PG_TIMEOUT to seconds, e.g. 1800, or unset it",
                             code="bad-pg-timeout")

    present = [n for n in RANK_VARS if env.get(n, "").strip()]
    if not present:
        for var in MPI_SIZE_VARS:  # one of several MPI tasks: alone it would train by itself
            size = env.get(var, "").strip()
            if size.isdigit() and int(size) > 1:
                raise UsageError(
                    f"this process is 1 of {size} MPI tasks ({var}={size}) but RANK, "
                    "WORLD_SIZE, LOCAL_RANK are not set, so each task would train alone",
                    subject=var, hint="start one 'meshrun run -- SCRIPT' per node under "
                                      "mpirun (it starts the workers), or export torchrun's "
                                      "variables from the MPI ones", code="mpi-without-launcher")
        return RankEnv(0, 1, 0, 1, 0, 1, True, backend, timeout_s)
    missing = [n for n in (*RANK_VARS, *STORE_VARS) if not env.get(n, "").strip()]
    if missing:
        raise UsageError(
            f"{', '.join(present)} {'is' if len(present) == 1 else 'are'} set but "
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not, so this "
            "process cannot tell where it belongs", subject=missing[0], hint=_LAUNCH_HINT,
            code="rank-env-incomplete")
    rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE", 1)
    local_rank, local_world = _int(env, "LOCAL_RANK"), _int(env, "LOCAL_WORLD_SIZE", 1)
    if rank >= world:
        raise UsageError(f"RANK={rank} is not below WORLD_SIZE={world}", subject="RANK",
                         hint="ranks run from 0 to WORLD_SIZE - 1; " + _LAUNCH_HINT,
                         code="rank-env-inconsistent")
    if local_rank >= local_world:
        raise UsageError(f"LOCAL_RANK={local_rank} is not below LOCAL_WORLD_SIZE={local_world}",
                         subject="LOCAL_RANK",
                         hint="local ranks run from 0 to LOCAL_WORLD_SIZE - 1; " + _LAUNCH_HINT,
                         code="rank-env-inconsistent")
    if "MESHRUN_NODE_RANK" in env:
        node_rank = _int(env, "MESHRUN_NODE_RANK")
    elif "GROUP_RANK" in env:
        node_rank = _int(env, "GROUP_RANK")
    else:
        node_rank = rank // local_world
    nnodes = (_int(env, "MESHRUN_NNODES", 1) if "MESHRUN_NNODES" in env
              else max(1, world // local_world))
    return RankEnv(rank, world, local_rank, local_world, node_rank, nnodes, False, backend,
                   timeout_s)


_INFO: RankInfo | None = None


def init_distributed(*, backend: str | None = None, timeout_s: float | None = None,
                     exit_on_error: bool = True) -> RankInfo:
    """Initialise ``torch.distributed`` once and return this process's :class:`RankInfo`.

    ``backend`` / ``timeout_s`` override ``MESHRUN_BACKEND`` / ``MESHRUN_PG_TIMEOUT``
    (with a warning when both are given and differ). See the module docstring for
    the variables read and the single-process mode.
    """
    try:
        return _init(backend, timeout_s)
    except UsageError as err:
        if not exit_on_error:
            raise
        print(err.line(), file=sys.stderr, flush=True)
        raise SystemExit(err.exit_code) from None


def _init(backend: str | None, timeout_s: float | None) -> RankInfo:
    global _INFO
    if _INFO is not None:
        import torch.distributed as dist

        if dist.is_initialized():
            return _INFO
    found = read_env(os.environ)  # before importing torch: a bad env fails at once
    import torch
    import torch.distributed as dist

    if dist.is_initialized():  # someone else initialised it: describe, do not re-create
        _INFO = _describe(found, dist.get_backend(), torch, dist)
        return _INFO
    chosen = _choose(backend, found.backend, "backend", "MESHRUN_BACKEND")
    if chosen is None:
        chosen = "nccl" if torch.cuda.is_available() else "gloo"
    seconds = _choose(timeout_s, found.timeout_s, "timeout_s", "MESHRUN_PG_TIMEOUT")
    device = _device(found, chosen, torch)

    kwargs: dict[str, Any] = {"backend": chosen}
    if seconds is not None:
        from datetime import timedelta

        kwargs["timeout"] = timedelta(seconds=seconds)
    if device.type == "cuda":
        kwargs["device_id"] = device  # eager NCCL init on the right GPU
    if found.single:
        store = dist.TCPStore("127.0.0.1", 0, 1, True)  # port 0: a free port, no race
        dist.init_process_group(store=store, rank=0, world_size=1, **kwargs)
        # a group left to the interpreter's shutdown can abort the process after a
        # successful run ("terminate called without an active exception": gloo's and the
        # store's C++ threads ended mid-teardown); this group is meshrun's own, so it
        # leaves it first, unless the script did
        import atexit

        atexit.register(_leave_single)
    else:
        dist.init_process_group(init_method="env://", **kwargs)
    _INFO = _describe(found, chosen, torch, dist, device)
    return _INFO


def _leave_single() -> None:
    """At exit: destroy the one-process group :func:`init_distributed` made, if it is still
    there (see meshrun.worker.leave for why a group must not be left to the shutdown)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001, S110 - exiting anyway; never mask the exit code
        pass


def _choose(arg: Any, env_value: Any, arg_name: str, var: str) -> Any:
    if arg is None:
        return env_value
    if env_value is not None and env_value != arg:
        warnings.warn(f"meshrun.init_distributed: {arg_name}={arg!r} overrides {var}="
                      f"{env_value!r}", stacklevel=4)
    return arg


def _device(found: RankEnv, backend: str, torch: Any) -> torch.device:
    if backend == "gloo" or not torch.cuda.is_available():
        if "nccl" in backend:
            raise UsageError(f"backend {backend!r} needs a GPU but CUDA is not available here",
                             subject="MESHRUN_BACKEND",
                             hint="use gloo on CPU hosts (unset MESHRUN_BACKEND), or check "
                                  "the GPU driver with nvidia-smi", code="backend-needs-gpu")
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if found.local_rank >= count:
        shown = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
        raise UsageError(
            f"LOCAL_RANK={found.local_rank} but this process sees {count} GPU(s) "
            f"(CUDA_VISIBLE_DEVICES={shown}): invalid device ordinal", subject="LOCAL_RANK",
            hint="start one process per visible GPU (meshrun run does), or fix "
                 "CUDA_VISIBLE_DEVICES", code="local-rank-no-gpu")
    device = torch.device("cuda", found.local_rank)
    torch.cuda.set_device(device)
    return device


def _describe(found: RankEnv, backend: str, torch: Any, dist: Any,
              device: Any = None) -> RankInfo:
    rank, world = dist.get_rank(), dist.get_world_size()
    if device is None:
        device = (torch.device("cuda", torch.cuda.current_device())
                  if torch.cuda.is_available() and backend != "gloo" else torch.device("cpu"))
    return RankInfo(rank=rank, world_size=world, local_rank=found.local_rank,
                    local_world_size=found.local_world_size, node_rank=found.node_rank,
                    nnodes=found.nnodes, device=device, backend=str(backend),
                    is_main=rank == 0)

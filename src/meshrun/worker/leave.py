"""``meshrun.destroy_process_group()``: leave a gloo (or NCCL) job together, without the exit
race that aborts a rank after its training succeeded.

The race (torch 2.11-2.13, gloo, seen in meshrun's own suite, under plain torchrun and in
users' HF Trainer scripts): rank A destroys its process group and exits, which closes its
sockets, while rank B is still inside ``destroy_process_group``; a gloo thread of B's sees
the connection end mid-teardown and the process aborts (``terminate called without an
active exception``, exit 134 or -6) although every step succeeded. A rank that leaves its
group to the interpreter's shutdown is worse: a gloo thread that wants the GIL then is
ended in the middle of C++.

So every rank, through the job's store (not the process group, which is being torn down):

1. counts itself in (``meshrun/leave/<attempt>/in``, :func:`meshrun.protocol.leave_key`)
   and waits until every rank has: all are out of their collectives;
2. destroys its process group;
3. counts itself out (``.../out``) and waits until every rank has: nobody's sockets close
   while another rank is still tearing down.

Every wait is bounded (``timeout``, 10 s by default, for the whole of it): a rank that died
or never comes makes the others go on alone after it, never wait for it longer. With one
rank, or a group that is not initialised, it is a plain ``destroy_process_group()``.
meshrun's worker shim calls it after every successful script (scripts need not);
scripts that tear down themselves call it instead of torch's.

torch is imported only when it is called.
"""

from __future__ import annotations

import os
import time

from ..protocol import leave_key


def destroy_process_group(timeout: float = 10.0) -> bool:
    """Tear the default process group down together with every other rank (see the module).
    True when every rank was seen in and out in time; False when it went on alone (a rank
    missing, no store to meet in) or there was no group."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return False
    world = dist.get_world_size()
    store = _default_store(dist)
    if world <= 1 or store is None:
        dist.destroy_process_group()
        return world <= 1
    deadline = time.monotonic() + timeout
    _bound(store, timeout)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    together = _meet(store, leave_key(attempt, "in"), world, deadline)
    dist.destroy_process_group()
    return _meet(store, leave_key(attempt, "out"), world, deadline, gone_means_done=True) \
        and together


def _default_store(dist):
    """The default group's store (its rendezvous: meshrun's round store, torchrun's agent
    store, the ``tcp://`` or ``env://`` store), or None where torch keeps it elsewhere."""
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - a private API: without it, destroy alone
        return None


def _bound(store, seconds: float) -> None:
    """No call on the store may wait longer than the whole leave (a frozen store host)."""
    from datetime import timedelta

    try:
        store.set_timeout(timedelta(seconds=seconds))
    except Exception:  # noqa: BLE001, S110 - a store without it: its own timeout holds
        pass


def _meet(store, key: str, world: int, deadline: float, gone_means_done: bool = False) -> bool:
    """Count this rank at ``key``; True once all ``world`` have, False at ``deadline`` or when
    the store is gone (with ``gone_means_done``, a store gone after this rank counted itself
    is True: its host, a rank that leaves only once it has seen every rank, has left)."""
    counted = False
    try:
        if int(store.add(key, 1)) >= world:
            return True
        counted = True
        while time.monotonic() < deadline:
            time.sleep(0.02)
            if int(store.add(key, 0)) >= world:
                return True
    except Exception:  # noqa: BLE001 - the store went (its host ended)
        return counted and gone_means_done
    return False

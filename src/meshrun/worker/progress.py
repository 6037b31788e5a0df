"""``meshrun.progress(step)``: tell meshrun's watchdog that this rank is making progress.

Call it once per training step (the recipes do). It writes
``meshrun/progress/<RANK>`` = ``"<step> <time>"`` into the job's store (``MESHRUN_STORE``, set by
meshrun for every worker)
at most once per second, so its cost is one small network write per second.
Outside meshrun (no ``MESHRUN_STORE``) it does nothing. When no rank ever
calls it, meshrun's hang detection is off (it cannot tell a hang from a long
step); node-loss detection works regardless.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from ..protocol import Progress, progress_key

_state: dict[str, Any] = {"store": None, "last": 0.0, "off": False}


def progress(step: int) -> None:
    if _state["off"]:
        return
    now = time.monotonic()
    if now - _state["last"] < 1.0:
        return
    _state["last"] = now
    try:
        if _state["store"] is None:
            where = os.environ.get("MESHRUN_STORE", "")
            if not where or "RANK" not in os.environ:
                _state["off"] = True
                return
            from torch.distributed import TCPStore

            host, _, port = where.rpartition(":")
            _state["store"] = TCPStore(host, int(port),
                                       is_master=False, timeout=timedelta(seconds=10),
                                       wait_for_workers=False)
        _state["store"].set(progress_key(os.environ["RANK"]),
                            Progress(int(step), time.time()).encode())
    except Exception:  # noqa: BLE001 - progress reports must never break training
        _state["store"] = None

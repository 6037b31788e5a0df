"""``meshrun.progress(step)``: tell meshrun's watchdog that this rank is making progress.

Call it once per training step (the recipes do). It writes
``meshrun/progress/<RANK>`` = ``"<step> <time>"`` into the job's store (the one
the workers already use for their process group: ``MASTER_ADDR:MASTER_PORT``)
at most once per second, so its cost is one small network write per second.
Outside meshrun (no ``MESHRUN_RUN_ID``) it does nothing. When no rank ever
calls it, meshrun's hang detection is off (it cannot tell a hang from a long
step); node-loss detection works regardless.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

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
            if not os.environ.get("MESHRUN_RUN_ID") or "RANK" not in os.environ:
                _state["off"] = True
                return
            from torch.distributed import TCPStore

            _state["store"] = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                       is_master=False, timeout=timedelta(seconds=10),
                                       wait_for_workers=False)
        _state["store"].set(f"meshrun/progress/{os.environ['RANK']}", f"{int(step)} {time.time()}")
    except Exception:  # noqa: BLE001 - progress reports must never break training
        _state["store"] = None

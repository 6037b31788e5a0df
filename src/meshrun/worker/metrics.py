"""``meshrun.log({...})``: a script's own figures in the run's ``metrics.jsonl`` (and
TensorBoard), the file the recipes write and ``meshrun report`` reads.

    for step, batch in enumerate(loader, 1):
        loss = train_step(batch)
        meshrun.log({"loss": loss.item(), "samples_per_s": batch_size * world / took},
                    step=step)

Every rank may call it; rank 0 (``RANK``) writes, the others only report progress (the
step counts as ``meshrun.progress(step)`` on every rank: hang detection and step times
for free). One JSON object per call: ``step`` (given, else the previous call's + 1),
``time`` (Unix seconds) and the values given. Values must be numbers, strings or
booleans; a value that is not becomes its ``str()``, a key that is not a string is
refused with one line. With the ``tensorboard`` package installed every number also goes
to ``<log dir>/tensorboard`` as a scalar of that step. Outside meshrun (no
``MESHRUN_LOG_DIR``) it does nothing, like ``progress``. A failing write (a full disk)
is said once on stderr and never stops training.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

_lock = threading.Lock()
_state: dict[str, Any] = {"step": 0, "tb": None, "tb_tried": False, "said": False}


def log(values: Mapping[str, Any] | None = None, *, step: int | None = None) -> None:
    """Record ``values`` for ``step`` (see the module docstring)."""
    folder = os.environ.get("MESHRUN_LOG_DIR")
    if values is None:
        values = {}
    if not isinstance(values, Mapping) or not all(isinstance(k, str) for k in values):
        raise TypeError("meshrun.log takes a dict of str keys, e.g. meshrun.log({'loss': "
                        "0.31}, step=10)")
    with _lock:
        if step is None:
            step = _state["step"] + 1
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"meshrun.log: step must be a whole number, not {step!r}")
        _state["step"] = step
    if folder is None:
        return
    from .progress import progress

    progress(step)
    if os.environ.get("RANK", "0") != "0":
        return
    record: dict[str, Any] = {"step": step, "time": round(time.time(), 3)}
    for key, value in values.items():
        if key in ("step", "time"):
            continue                    # meshrun's own fields: the step given, the moment
        record[key] = _plain(value)
    try:
        with open(os.path.join(folder, "metrics.jsonl"), "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
    except OSError as exc:
        _say_once(f"meshrun.log: cannot write {folder}/metrics.jsonl ({exc.strerror}); "
                  "training goes on")
    _tensorboard(folder, step, record)


def _plain(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)   # JSON has no NaN
    item = getattr(value, "item", None)                          # a 0-d tensor, numpy scalar
    if callable(item):
        try:
            return _plain(item())
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


def _tensorboard(folder: str, step: int, record: Mapping[str, Any]) -> None:
    if not _state["tb_tried"]:
        _state["tb_tried"] = True
        import importlib.util

        if importlib.util.find_spec("tensorboard") is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter

                _state["tb"] = SummaryWriter(os.path.join(folder, "tensorboard"))
            except Exception:  # noqa: BLE001 - TensorBoard is a help, never a failure
                _state["tb"] = None
    writer = _state["tb"]
    if writer is None:
        return
    try:
        for key, value in record.items():
            if key not in ("step", "time") and isinstance(value, (int, float)) \
                    and not isinstance(value, bool):
                writer.add_scalar(key, value, step)
        writer.flush()
    except Exception:  # noqa: BLE001
        pass


def _say_once(text: str) -> None:
    if not _state["said"]:
        _state["said"] = True
        print(text, file=sys.stderr, flush=True)

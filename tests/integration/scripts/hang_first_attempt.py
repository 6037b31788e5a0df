"""loop.py, but HANG_RANK hangs only in the first attempt (TORCHELASTIC_RESTART_COUNT 0).

Every attempt appends "attempt <n> rank <r>" to LOOP_DIR/attempts; every step goes through
meshrun.log (LOOP_LOG=1), so that the run's goodput can be read."""

import os
import runpy
from pathlib import Path

attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
with open(Path(os.environ["LOOP_DIR"]) / "attempts", "a") as handle:
    handle.write(f"attempt {attempt} rank {os.environ['RANK']}\n")
os.environ["LOOP_LOG"] = "1"
if attempt > 0:
    os.environ.pop("HANG_RANK", None)
runpy.run_path(str(Path(__file__).with_name("loop.py")), run_name="__main__")

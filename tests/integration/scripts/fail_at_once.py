"""Every rank fails at once (exit 1 with a traceback), before any collective: the failure
every node sees of its own. With FAIL_STAMPS set, each rank first writes the time it failed
to $FAIL_STAMPS/rank<R> (bench/fail_fast.py measures from the last of them)."""

import os
import time

stamps = os.environ.get("FAIL_STAMPS")
if stamps:
    with open(os.path.join(stamps, f"rank{os.environ['RANK']}"), "w") as handle:
        handle.write(repr(time.time()))
raise RuntimeError(f"rank {os.environ['RANK']} fails at once, on purpose")

"""What a node's console and logs show of its workers (issue 23: a console you can read):
a progress bar as a terminal would show it, the short banner, and --show-ranks. One node
of two workers each, with the real elastic agent; the bar is tqdm's own."""

from __future__ import annotations

import re

import pytest
from helpers import SCRIPTS, meshrun

pytestmark = pytest.mark.slow
BAR = re.compile(r"\d+%\|")


def test_a_progress_bar_is_its_last_state_in_the_log_and_a_few_states_on_the_console(
        tmp_path):
    """tqdm redraws its bar with a carriage return; torch's own tailer turned every redraw
    into a line (30 lines for 30 items, on the console and in rank<r>.log)."""
    pytest.importorskip("tqdm")
    done = meshrun("run", "--nproc-per-node", "2", "--show-ranks", "1", "--run-id", "bar",
                   "--", str(SCRIPTS / "progress_bar.py"), cwd=tmp_path, timeout=90,
                   check_rc=0)
    logs = tmp_path / "logs" / "bar"
    for rank in (0, 1):
        bars = [line for line in (logs / f"rank{rank}.log").read_text().splitlines()
                if BAR.search(line)]
        assert len(bars) == 1 and "30/30" in bars[0], bars        # the last state only
    shown = [line for line in done.stderr.splitlines() if BAR.search(line)]
    assert shown and all(line.startswith("[rank1]: ") for line in shown), shown
    assert "30/30" in shown[-1] and len(shown) <= 8, shown       # about one a second
    # --show-ranks 1: rank 0's output is in its log, not on the console
    assert "[rank1]: hello from rank 1" in done.stdout
    assert "hello from rank 0" not in done.stdout + done.stderr
    assert "hello from rank 0" in (logs / "rank0.log").read_text()
    assert "[rank0]: hello from rank 0" in (logs / "node0.log").read_text()
    # the short banner on the console, the whole plan in the node log
    assert done.stdout.startswith("meshrun ") and ": node 0 of 1 on " in done.stdout
    assert "  env " not in done.stdout and "  env " in (logs / "node0.log").read_text()


def test_verbose_prints_the_whole_plan_and_a_filter_that_shows_nothing_is_said(tmp_path):
    done = meshrun("run", "--nproc-per-node", "1", "--verbose", "--run-id", "v",
                   "--show-ranks", "3", "--", str(SCRIPTS / "progress_bar.py"), cwd=tmp_path,
                   timeout=90, check_rc=0)
    assert "  global ranks       : 0 " in done.stdout and "  env " in done.stdout
    # a flag with no effect is said (issue 23): rank 3 is not in a job of one rank
    assert "--show-ranks names no rank of this job (ranks 0)" in done.stdout + done.stderr
    assert "hello from rank 0" not in done.stdout + done.stderr

"""Every store call of meshrun's own is bounded: node 0 frozen (SIGSTOP) while another
node waits in the join does not hold that node past meshrun's call limit."""

import signal
import subprocess
import sys
import time

import pytest
from helpers import clean_env, free_port

pytestmark = pytest.mark.slow


def test_a_frozen_store_host_during_the_join_ends_the_wait_with_one_line(tmp_path):
    from meshrun.runtime.store import CALL_S

    port = str(free_port())
    script = tmp_path / "train.py"
    script.write_text("print('never started')\n")

    def node(rank: int) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "meshrun", "run", "--nnodes", "3", "--node-rank", str(rank),
             "--master-addr", "127.0.0.1", "--master-port", port, "--run-id", "frozen",
             "--no-preflight", "--join-timeout", "300", "--", str(script)],
            cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)

    host = node(0)                             # node 0 hosts the store; node 2 never comes
    other = None
    try:
        deadline = time.monotonic() + 60
        other = node(1)
        out = []
        while time.monotonic() < deadline:   # node 1 waits in the join ("2/3 joined")
            line = other.stdout.readline()
            out.append(line)
            if "waiting for nodes: 2/3 joined" in line:
                break
        else:
            pytest.fail("".join(out))
        host.send_signal(signal.SIGSTOP)       # node 0 freezes: its store answers nothing
        frozen_at = time.monotonic()
        rest, _ = other.communicate(timeout=CALL_S + 30)
        took = time.monotonic() - frozen_at
        text = "".join(out) + rest
        assert other.returncode == 3, text
        assert "node 0's store at 127.0.0.1:" in text and "did not answer in time" in text, text
        assert "[master-lost]" in text, text
        assert took < CALL_S + 10, (took, text)  # not the join timeout (300 s), not TCP's
    finally:
        host.send_signal(signal.SIGCONT)
        for proc in (host, other):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()

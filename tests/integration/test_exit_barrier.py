"""Stop signals while torch's agent waits in its exit barrier (issue 21: "signals always
work"). Node 0's workers finish; node 1's still run. torch's agent on node 0 then waits
for node 1's agent in a store call in C++ (``_exit_barrier``, up to 300 s) where no Python
signal handler runs: a SIGTERM or SIGINT there was ignored for minutes. meshrun's relay
(runtime/supervise.py ``relay_stop_signals``) shuts the agent's store connections when a
stop signal finds it there, so the node ends within seconds."""

import signal
import time

import pytest
from helpers import SCRIPTS, Nodes

from meshrun.harness import tree

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

FAST = ["--beat", "0.2", "--hang-timeout", "0", "--slow-window", "0"]
UNEVEN = ["--", str(SCRIPTS / "finish_unevenly.py"), "600"]


def _in_barrier(nodes: Nodes) -> None:
    """Until node 0's worker has finished and exited (it first waits up to 10 s for the
    other rank to leave the process group with it): its agent is then in the exit
    barrier."""
    log = nodes.folder / "logs" / "eb" / "rank0.log"
    agent = nodes.procs[0]
    deadline = time.monotonic() + 120
    while not (log.exists() and "rank 0 done" in log.read_text()) or tree(agent.pid)[1:]:
        assert time.monotonic() < deadline and agent.poll() is None, nodes.outputs()[-3000:]
        time.sleep(0.1)
    time.sleep(1.0)   # the agent sees its worker's exit (0.1 s polls) and enters the barrier


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_ends_a_node_waiting_in_the_exit_barrier(tmp_path, sig):
    with Nodes(tmp_path, UNEVEN, nnodes=2, run_id="eb", extra=FAST,
               log_dir=tmp_path / "logs") as nodes:
        _in_barrier(nodes)
        sent = time.monotonic()
        nodes.signal(0, sig, workers=False)   # the agent alone: its workers are gone
        try:
            code = nodes.procs[0].wait(timeout=30)
        except Exception:  # noqa: BLE001
            code = None
        took = time.monotonic() - sent
        out0 = nodes.output(0)
    assert code == 128 + sig, out0[-3000:]
    assert took < 5, (took, out0[-3000:])
    assert f"stopped by {signal.Signals(sig).name}" in out0, out0[-3000:]
    assert "Traceback" not in out0, out0[-3000:]


def test_a_peer_stopped_by_a_signal_does_not_leave_node_0_in_the_exit_barrier(tmp_path):
    """SIGINT to node 1 (its agent and workers, as Ctrl-C on its terminal) while node 0's
    agent waits in the barrier: node 1 stops, and node 0 ends within seconds too, saying
    why, not after torch's 300 s."""
    with Nodes(tmp_path, UNEVEN, nnodes=2, run_id="eb", extra=FAST,
               log_dir=tmp_path / "logs") as nodes:
        _in_barrier(nodes)
        sent = time.monotonic()
        nodes.signal(1, signal.SIGINT)
        codes = nodes.wait(timeout=60)
        took = time.monotonic() - sent
        out0, out1 = nodes.output(0), nodes.output(1)
    assert codes[1] == 128 + signal.SIGINT, out1[-3000:]
    assert codes[0] == 0 and took < 10, (codes, took, out0[-3000:])   # its workers succeeded
    assert "meshrun: node 1 (" in out0 and "was stopped before its workers finished; node 0's " \
        "workers had finished: not waiting for it in torch's exit barrier" in out0, out0[-3000:]
    assert "Traceback" not in out0, out0[-3000:]

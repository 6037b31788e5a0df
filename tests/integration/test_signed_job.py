"""The job token, for real (issue 21): two `meshrun run` nodes given the same
MESHRUN_JOB_TOKEN train while a stranger, a plain TCPStore client and a socket, does what
issue 21 did to an unsigned job: a well-formed watch listing node 1 lost and a "failed"
goodbye for node 1 (each kept up for 2 s), an ``add`` on the next round's arrivals, and a
liveness link with node 1's claim token (read from the store, as anyone can). Unsigned, the
first two stopped the job blaming node 1 and the third restarted node 0's workers. Signed,
the job trains on, nobody is blamed for them, and each node says once what it ignored;
then rank 1 really hangs, and the hang is found from the workers' own signed progress
reports, naming rank 1 (what a token must not break)."""

from __future__ import annotations

import re
import socket
import struct
import time
from datetime import timedelta

import pytest
from helpers import SCRIPTS, Nodes, clean_env, wait_for_files

from meshrun import protocol

pytestmark = pytest.mark.slow
TOKEN = "a-job-token-for-the-test-0123456789"


def _payload(raw: bytes) -> bytes:
    """A signed value's payload, as a stranger reading the store sees it (not secret)."""
    return raw.split(b":", 3)[3] if raw.startswith(b"ms1:") else raw


def test_a_signed_job_trains_through_a_strangers_writes(tmp_path):
    from torch.distributed import TCPStore

    env = clean_env(LOOP_DIR=str(tmp_path), HANG_RANK="1", HANG_AT_STEP="150",
                    MESHRUN_JOB_TOKEN=TOKEN)
    nodes = Nodes(tmp_path, ["--", str(SCRIPTS / "loop.py")], nnodes=2, run_id="signed",
                  env=env, extra=["--node-timeout", "10", "--hang-timeout", "6"])
    with nodes:
        wait_for_files(nodes, tmp_path, "pid.*", 2)   # both workers train
        stranger = TCPStore("127.0.0.1", nodes.port, is_master=False,
                            timeout=timedelta(seconds=10), wait_for_workers=False)
        assert stranger.get(protocol.WATCH).startswith(b"ms1:")   # the job is signed
        forged_watch = protocol.Watch(10**6, lost=((1, 99.0),)).encode()
        forged_goodbye = protocol.Heartbeat(10**6, "failed").encode()
        until = time.monotonic() + 2.0
        while time.monotonic() < until:
            stranger.set(protocol.WATCH, forged_watch)
            stranger.set(protocol.heartbeat_key(1), forged_goodbye)
            time.sleep(0.05)
        stranger.add(protocol.round_arrived_key(1), 1)
        hub = protocol.Endpoint.decode(_payload(stranger.get(protocol.LINKS)))
        claim = protocol.NodeClaim.decode(_payload(stranger.get(protocol.node_key(1))))
        with socket.create_connection((hub.host, hub.port), timeout=5) as link:
            link.sendall(struct.pack("!I8s", 1, claim.token.encode()[:8].ljust(8, b"\0")))
        codes = nodes.wait(180)
        out = nodes.outputs()
    assert codes == [5, 5], out[-4000:]          # the real hang, and nothing else
    assert out.count("job hung: no progress for") == 2 and \
        "stuck: rank 1 on node 1" in out, out[-4000:]
    assert "is lost" not in out and "node 1 failed" not in out, out[-4000:]
    assert "restart" not in out, out[-4000:]
    assert "control plane signed with the job token" in out
    # each node's own beat overwrites its key once a second, so which forged values a
    # reader met in those 2 s is the machine's timing (the unit test of the watchdog says
    # each once, deterministically): at least one of them, ignored by name
    assert re.search(r"unsigned writes? to meshrun/(watch|hb/1) \(the job token is set", out), \
        out[-4000:]
    assert re.search(r"unsigned writes? to meshrun/round/1/arrived ", out), out[-4000:]
    assert "ignored a liveness link claiming node 1" in out, out[-4000:]
    assert "meshrun/progress" not in out   # the workers' own reports are signed and taken
    assert TOKEN not in out and not any(TOKEN in p.read_text(errors="replace")
                                        for p in (tmp_path / "logs").rglob("*") if p.is_file())

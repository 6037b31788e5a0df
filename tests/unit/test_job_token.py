"""The job token wired into the join (issue 21): node 0's launch nonce, a node whose token
differs from node 0's stopped before it claims anything, a node told another node count
stopped at once, and a signed join that strangers' writes cannot complete or spoil."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import free_port
from unit_fakes import plan as make

from meshrun import protocol
from meshrun.errors import StartupError
from meshrun.runtime.store import control_plane_line, join, open_store
from meshrun.signing import SignedStore

TOKEN = "a-job-token-of-some-length-0123456789"


def plans(nnodes: int = 2, addr: str = "127.0.0.1"):
    port = str(free_port())
    return [replace(make({"MESHRUN_NNODES": str(nnodes), "MESHRUN_NODE_RANK": str(rank),
                          "MASTER_ADDR": addr, "MASTER_PORT": port}),
                    join_timeout=5, run_id="r1") for rank in range(nnodes)]


@pytest.mark.parametrize("mine,theirs,words", [
    (TOKEN, TOKEN + "-other", "this node's job token is not node 0's"),
    (TOKEN, None, "this node has a job token and node 0's job runs without one"),
    (None, TOKEN, "node 0's job is signed with a job token and this node has none"),
])
def test_a_node_whose_token_differs_from_node_0s_stops_before_it_claims(mine, theirs, words):
    first, second = plans()
    host = open_store(first, token=theirs)
    try:
        with pytest.raises(StartupError) as caught:
            open_store(second, token=mine)
        assert caught.value.code == "job-token-differs" and words in caught.value.line()
        assert TOKEN not in caught.value.line()
        assert not host.store.check([protocol.node_key(1)])   # nothing claimed
    finally:
        host.close_calls()


def test_a_node_told_another_node_count_stops_at_once():
    """Issue 21: a node started with WORLD_SIZE=3 and the job's run id passed the join and
    the preflight ("all 3 nodes joined") before it failed."""
    first, _ = plans(2)
    _, _, third = plans(3)
    third = replace(third, master_port=first.master_port)
    host = open_store(first)
    try:
        with pytest.raises(StartupError) as caught:
            open_store(third)
        assert caught.value.code == "nnodes-differs"
        assert "node 0's job has 2 nodes, this node was told 3" in caught.value.line()
    finally:
        host.close_calls()


def test_a_signed_join_ignores_a_strangers_adds_and_claims():
    """With a token the join counts only signed claims: a stranger's add on meshrun/joined
    and a forged claim for node 1 neither complete the join nor take node 1's rank."""
    import threading

    first, second = plans()
    host = open_store(first, token=TOKEN)
    try:
        assert isinstance(host.calls, SignedStore)
        assert host.store.get(protocol.WATCH).startswith(b"ms1:")   # signed from the start
        host.store.add(protocol.JOINED, 5)                          # a stranger's adds
        host.store.set(protocol.mark_key(protocol.JOINED, 1), "1")  # and a forged mark
        out: dict = {}
        waiting = threading.Thread(target=lambda: out.update(r=join(host, first)), daemon=True)
        waiting.start()
        waiting.join(1.5)
        assert waiting.is_alive()                    # not fooled: node 1 has not joined
        member = open_store(second, token=TOKEN)
        try:
            assert join(member, second) is None
            waiting.join(5)
            assert not waiting.is_alive() and out["r"] is None
        finally:
            member.close_calls()
        news = host.calls.verifier.news()
        assert any("unsigned write" in line and "meshrun/joined/by/1" in line for line in news)
    finally:
        host.close_calls()


def test_the_banner_says_whether_the_control_plane_is_signed():
    loop, _ = plans()
    remote, _ = plans(addr="10.0.0.5")
    assert control_plane_line(loop, None) == ""
    assert control_plane_line(loop, TOKEN).startswith("control plane signed with the job token")
    line = control_plane_line(remote, None)
    assert line.startswith("warning: the control plane is unauthenticated: anyone who can "
                           "reach 10.0.0.5:") and "MESHRUN_JOB_TOKEN" in line
    assert control_plane_line(remote, TOKEN).startswith("control plane signed")
    single = replace(remote, nnodes=1)
    assert control_plane_line(single, None) == ""


def test_doctor_says_whether_the_control_plane_is_signed():
    from meshrun.runtime.doctor import _control_plane

    remote, _ = plans(addr="10.0.0.5")
    (check,) = _control_plane(remote, None)
    assert (check.code, check.severity) == ("control-plane-unauthenticated", "warning")
    assert check.message.startswith("the control plane is unauthenticated")
    assert check.fix.startswith("set MESHRUN_JOB_TOKEN (or --token-file)")
    (signed,) = _control_plane(remote, TOKEN)
    assert (signed.code, signed.severity) == ("control-plane-signed", "info")
    assert TOKEN not in signed.line() and TOKEN not in check.line()


@pytest.mark.parametrize("verb", ["run", "simulate"])
def test_a_bad_token_stops_the_command_before_anything_starts(tmp_path, verb):
    import subprocess
    import sys

    from helpers import clean_env

    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    nodes = ["--nnodes", "1"] if verb == "run" else ["--nodes", "2"]
    done = subprocess.run([sys.executable, "-m", "meshrun", verb, *nodes, "--", str(script)],
                          env=clean_env(MESHRUN_JOB_TOKEN="s3cr3t"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert lines == ["meshrun: error: MESHRUN_JOB_TOKEN holds 6 characters, fewer than 16; "
                     "fix: give every node the same secret of at least 16 characters (python "
                     "-c 'import secrets; print(secrets.token_urlsafe(32))') "
                     "[job-token-invalid]"], lines
    assert not (tmp_path / "logs").exists()

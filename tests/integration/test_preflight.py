"""Cross-node preflight between two real `meshrun run` nodes on loopback."""

import os
import shutil
import subprocess
import sys

import pytest
from helpers import SCRIPTS, clean_env, free_port, own_lines

pytestmark = pytest.mark.slow


def _copy(tmp_path, name):
    repo = tmp_path / name
    repo.mkdir()
    shutil.copy(SCRIPTS / "report.py", repo / "train.py")
    (repo / "model.py").write_text("WIDTH = 8\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    # one commit, the same in every copy: its hash covers its time, so the time is fixed
    # (two copies committed in different seconds of a busy host were two commits)
    when = dict.fromkeys(("GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE"), "2026-01-01T00:00:00Z")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "one"], check=True, env={**os.environ, **when})
    return repo


def _two_nodes(repos, *extra):
    port = str(free_port())
    procs = [subprocess.Popen(
        [sys.executable, "-m", "meshrun", "run", "--nnodes", "2", "--node-rank", str(rank),
         "--master-addr", "127.0.0.1", "--master-port", port, "--run-id", "pf", *extra,
         "--", "train.py"],
        cwd=repo, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for rank, repo in enumerate(repos)]
    return [(p.wait(timeout=120), p.stdout.read()) for p in procs]


def test_working_copies_differing_in_one_file_stop_both_nodes(tmp_path):
    a, b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    (b / "model.py").write_text("WIDTH = 16\n")           # one uncommitted change on node 1
    (rc0, out0), (rc1, out1) = _two_nodes([a, b])
    assert rc0 == 3 and rc1 == 3, (out0, out1)
    for out in (out0, out1):
        assert "preflight: node 1 (" in out and "differs from node 0 in: code" in out, out
        assert "REPORT" not in out                         # no worker started
    # node 0's table: the node, the field, both values
    table = [line for line in own_lines(out0) if line.startswith("  1 (")]
    assert table and "code" in table[0] and "+ changes" in table[0], out0
    assert "file model.py" in table[1] and "as committed" in table[1], out0


def test_clean_clones_with_different_outputs_agree(tmp_path):
    """Two clones of one commit, logs/ not ignored, each with its own run outputs (logs,
    a checkpoint, data): the code is the same, preflight passes, the run succeeds."""
    a, b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    (a / "logs" / "old").mkdir(parents=True)
    (a / "logs" / "old" / "node0.log").write_text("an earlier run\n")
    (b / "checkpoints" / "x" / "step-1").mkdir(parents=True)
    (b / "checkpoints" / "x" / "step-1" / ".metadata").write_text("m")
    (b / "data.bin").write_bytes(b"\0" * 4096)
    (rc0, out0), (rc1, out1) = _two_nodes([a, b])
    assert rc0 == 0 and rc1 == 0, (out0, out1)
    assert "REPORT" in out0 and "differs" not in out0 + out1


def test_no_preflight_lets_them_run(tmp_path):
    a, b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    (b / "model.py").write_text("WIDTH = 16\n")
    (rc0, out0), (rc1, out1) = _two_nodes([a, b], "--no-preflight")
    assert rc0 == 0 and rc1 == 0, (out0, out1)
    assert "preflight skipped" in out0


def test_required_path_missing_on_one_node(tmp_path):
    a, b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    (a / "data").mkdir()
    (rc0, out0), (rc1, _) = _two_nodes([a, b], "--require-path", "data")
    assert rc0 == 3 and rc1 == 3
    assert "node 1 (" in out0 and "path data" in out0, out0

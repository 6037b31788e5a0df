"""Files the user names that are not what they should be (issue 21): each is one line and
exit 2 before anything starts, and nothing of the user's is lost or left half-written."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from meshrun.cli import _main
from meshrun.harness import clean_env

LINE_END = " [{}]"


@pytest.fixture
def here(neutral_here):
    return neutral_here


def _refused(capsys, argv: list[str], code: str) -> str:
    rc = _main(argv)
    err = capsys.readouterr().err
    assert rc == 2, (argv, rc, err)
    lines = [x for x in err.splitlines() if x.startswith("meshrun: error:")]
    assert len(lines) == 1 and lines[0].endswith(LINE_END.format(code)), err
    return lines[0]


def test_plan_refuses_what_run_refuses(here, capsys):
    _refused(capsys, ["plan", "--", "missing.py"], "script-not-found")
    (here / "train.py").write_text("print('hi')\n")
    assert _main(["plan", "--", "train.py"]) == 0


@pytest.mark.parametrize("where", ["FILE", "FILE/sub"])
def test_a_checkpoint_folder_that_is_a_file_is_refused_by_plan_and_run(here, capsys, where):
    (here / "FILE").write_text("mine\n")
    for verb in ("plan", "run"):
        line = _refused(capsys, [verb, "--recipe", "mlp-tp", "--nproc-per-node", "2",
                                 "--checkpoint-dir", where], "checkpoint-dir-not-a-folder")
        assert where in line
    assert (here / "FILE").read_text() == "mine\n"
    assert not (here / "logs").exists()          # run refused before anything started


def test_doctor_says_the_checkpoint_folder_is_a_file(here, capsys):
    from meshrun.runtime.doctor import _disk
    from meshrun.runtime.planning import plan_here
    from meshrun.topology import Flags

    (here / "FILE").write_text("x")
    plan = plan_here(clean_env(), Flags(), None, None)
    checks = {c.subject: c for c in _disk(plan, "FILE")}
    assert checks["FILE"].severity == "error" and "is a file" in checks["FILE"].message


def test_a_config_that_is_a_device_a_fifo_or_too_large_is_refused_without_reading_it(
        here, capsys):
    os.mkfifo(here / "fifo.toml")
    (here / "big.toml").write_text("#" * (2 << 20))
    for path in ("/dev/zero", "fifo.toml", "big.toml"):
        line = _refused(capsys, ["plan", "--config", path], "config-file-unreadable")
        assert path in line


def test_non_finite_numbers_in_set_are_one_line(here, capsys):
    for value, what in (("train.steps=1e999", "is not a whole number"),
                        ("train.lr=inf", "is not a number"), ("train.lr=-inf", "is not a number")):
        line = _refused(capsys, ["plan", "--recipe", "mlp-tp", "--set", value],
                        "config-bad-value")
        assert what in line


def test_report_on_binary_metrics_names_the_line(here, capsys):
    run = here / "run"
    run.mkdir()
    (run / "plan.node0.json").write_text('{"world_size": 2, "nnodes": 1}')
    (run / "metrics.jsonl").write_bytes(bytes(range(256)) * 20)
    line = _refused(capsys, ["report", str(run)], "report-bad-run-dir")
    assert "metrics.jsonl:1: is not a metrics record" in line


# --- render -o: the whole file or nothing ----------------------------------------------------

RENDER = ["render", "slurm", "--nnodes", "2", "--nproc-per-node", "1"]


def test_render_output_is_written_whole_and_kept_unless_forced(here, capsys):
    (here / "train.py").write_text("pass\n")
    out = here / "job.sbatch"
    assert _main([*RENDER, "-o", str(out), "--", "train.py"]) == 0
    first = out.read_text()
    assert first.startswith("#!") and not list(here.glob(".job.sbatch.*"))   # no temp left
    out.write_text("my edits\n")
    _refused(capsys, [*RENDER, "-o", str(out), "--", "train.py"], "output-exists")
    assert out.read_text() == "my edits\n"
    os.chmod(out, 0o600)
    assert _main([*RENDER, "-o", str(out), "--force", "--", "train.py"]) == 0
    assert out.read_text() == first and (out.stat().st_mode & 0o777) == 0o600


def test_render_refuses_a_folder_or_a_fifo_even_with_force(here, capsys):
    (here / "train.py").write_text("pass\n")
    (here / "adir").mkdir()
    os.mkfifo(here / "fifo")
    _refused(capsys, [*RENDER, "-o", "adir", "--force", "--", "train.py"], "output-is-a-folder")
    _refused(capsys, [*RENDER, "-o", "fifo", "--force", "--", "train.py"], "output-not-a-file")
    assert list((here / "adir").iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare(1) for a private tmpfs")
def test_render_on_a_full_or_read_only_filesystem_leaves_no_file(tmp_path):
    """A 4 KB tmpfs, filled, then remounted read-only (in a mount namespace of its own):
    one line each time, and nothing but the filler on it."""
    (tmp_path / "train.py").write_text("pass\n")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    meshrun = f"{sys.executable} -m meshrun " + " ".join(RENDER)
    script = (f"mount -t tmpfs -o size=4k tmpfs {mnt} && "
              f"dd if=/dev/zero of={mnt}/fill bs=1k count=8 2>/dev/null; "
              f"{meshrun} -o {mnt}/job.sbatch -- train.py; echo rc=$?; ls -A {mnt}; "
              f"rm {mnt}/fill; mount -o remount,ro {mnt}; "
              f"{meshrun} -o {mnt}/job.sbatch -- train.py; echo rc=$?; ls -A {mnt}")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=tmp_path, env=clean_env(),
                          capture_output=True, text=True, timeout=60)
    out = done.stdout.splitlines()
    assert out == ["rc=2", "fill", "rc=2"], (done.stdout, done.stderr)
    errors = [x for x in done.stderr.splitlines() if x.startswith("meshrun: error:")]
    assert len(errors) == 2 and all(x.endswith("[output-unwritable]") for x in errors), errors
    assert "No space left on device" in errors[0] and "Read-only file system" in errors[1]
    assert not Path(mnt / "job.sbatch").exists()

"""preflight.compare: what must match across nodes, and how a mismatch is shown."""

import subprocess

from meshrun.runtime import preflight
from meshrun.runtime.preflight import compare, mismatch_table, summary


def fp(**over):
    base = {"hostname": "a", "meshrun": "0.1.0", "python": "3.11.7", "torch": "2.13.0",
            "cuda": "12.4", "nccl": "2.21.5", "packages": "h1", "package_list": ["numpy==2.0"],
            "code": "git abc", "gpu_model": "H100", "gpu_count": 8, "ib": "mlx5_0",
            "interface": "ib0", "paths": {}, "clock": 0.0}
    base.update(over)
    return base


def test_identical_nodes_agree_even_with_different_hosts_and_interfaces():
    verdict = compare({0: fp(), 1: fp(hostname="b", interface="eth7")}, {1: 0.2})
    assert verdict.ok and verdict.warnings == ()


def test_code_difference_names_the_node_and_the_field():
    verdict = compare({0: fp(), 1: fp(hostname="b"), 2: fp(hostname="c", code="git abc + changes 9f")})
    assert not verdict.ok
    assert [(d.node_rank, d.field) for d in verdict.differences] == [(2, "code")]
    assert summary(verdict) == "node 2 (c) differs from node 0 in: code"
    table = mismatch_table(verdict)
    assert "2 (c)" in table and "git abc + changes 9f" in table and "git abc" in table
    header, row = table.splitlines()[:2]     # the differing node's value under "its value"
    assert header.split() == ["node", "field", "its", "value", "node", "0's", "value"]
    assert row.index("git abc + changes 9f") == header.index("its value"), table


def test_package_difference_lists_the_packages():
    verdict = compare({0: fp(), 1: fp(packages="h2", package_list=["numpy==1.26"])})
    (diff,) = verdict.differences
    assert (diff.field, diff.theirs, diff.ours) == ("packages", "numpy==1.26", "numpy==2.0")


def test_versions_and_gpus_must_match():
    verdict = compare({0: fp(), 1: fp(torch="2.11.0", gpu_count=4, gpu_model="A100")})
    assert {d.field for d in verdict.differences} == {"torch", "gpu_count", "gpu_model"}


def test_required_path_missing_on_a_node():
    verdict = compare({0: fp(paths={"/data": True}), 1: fp(paths={"/data": False})})
    (diff,) = verdict.differences
    assert (diff.node_rank, diff.field, diff.theirs, diff.ours) == (1, "path /data", "missing",
                                                                    "exists")


def test_clock_skew_over_one_second_is_a_warning_not_an_error():
    verdict = compare({0: fp(), 1: fp(), 2: fp()}, {1: 0.9, 2: -1.7})
    assert verdict.ok
    assert len(verdict.warnings) == 1 and "node 2" in verdict.warnings[0]
    assert "-1.7 s" in verdict.warnings[0]


def test_verdict_round_trips_through_json():
    verdict = compare({0: fp(), 1: fp(code="file 1")}, {1: 3.0})
    again = preflight.Verdict.from_json(verdict.to_json())
    assert again == verdict


def _repo(tmp_path):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "util.py").write_text("X = 1\n")
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "c"], check=True)
    return str(tmp_path / "train.py")


def test_code_identity_sees_uncommitted_changes(tmp_path):
    script = _repo(tmp_path)
    clean = preflight.code_identity(script)
    assert clean.startswith("git ") and "changes" not in clean
    (tmp_path / "util.py").write_text("X = 2\n")
    changed = preflight.code_identity(script)
    assert changed.startswith(clean + " + changes ")
    (tmp_path / "util.py").write_text("X = 1\n")
    (tmp_path / "new.py").write_text("Y = 1\n")  # an untracked file counts too
    assert preflight.code_identity(script) not in (clean, changed)


def test_code_identity_outside_git_hashes_the_script(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("a = 1\n")
    first = preflight.code_identity(str(script))
    script.write_text("a = 2\n")
    assert first.startswith("file ") and preflight.code_identity(str(script)) != first
    assert preflight.code_identity(str(tmp_path / "missing.py")) == "none"


def test_outputs_left_in_the_repository_are_not_code(tmp_path):
    """Logs, checkpoints, data and run outputs differ between nodes as a matter of course:
    a clean clone with them must still match a clean clone without them."""
    script = _repo(tmp_path)
    clean, files = preflight.code_state(script)
    assert clean.startswith("git ") and "changes" not in clean and files == {}
    for name, text in [("logs/run1/node1.log", "x"), ("logs/run1/plan.node1.json", "{}"),
                       ("logs/run1/stacks/rank0.txt", "x"), ("checkpoints/r/step-2/.metadata", "x"),
                       ("checkpoints/r/step-2/__0_0.distcp", "x"), ("data/train.bin", "x"),
                       ("wandb/run-1/files/code.py", "x"), ("__pycache__/util.cpython-311.pyc", "x"),
                       ("runs/events.out.tfevents.1", "x"), ("nohup.out", "x"),
                       ("huge.py", "#" * ((1 << 20) + 1)),
                       ("lightning_logs/version_0/hparams.yaml", "lr: 1"),
                       ("outputs/2026-11-23/10-00-00/.hydra/config.yaml", "lr: 1")]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    # a run's own folders, even with code-like names in them
    (tmp_path / "out" / "ckpt").mkdir(parents=True)
    (tmp_path / "out" / "ckpt" / "saved_config.yaml").write_text("a: 1\n")
    (tmp_path / "logs" / "run1" / "copy.py").write_text("x = 1\n")
    # the exclusions given through a symlink to the repository still apply
    (tmp_path.parent / f"{tmp_path.name}-link").symlink_to(tmp_path)
    via = tmp_path.parent / f"{tmp_path.name}-link"
    assert preflight.code_state(script, exclude=(str(via / "logs" / "run1"),
                                                 str(via / "out" / "ckpt"))
                                ) == (clean, {})


def test_untracked_sources_and_changes_are_listed(tmp_path):
    script = _repo(tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "new.py").write_text("Y = 1\n")
    (tmp_path / "conf.yaml").write_text("lr: 1\n")
    (tmp_path / "util.py").unlink()
    identity, files = preflight.code_state(script, exclude=(str(tmp_path),))  # never the script's folder
    assert identity.startswith("git ") and " + changes " in identity
    assert set(files) == {"pkg/new.py", "conf.yaml", "util.py"}
    assert files["util.py"] == "deleted" and len(files["pkg/new.py"]) == 12


def test_same_commit_different_changes_names_the_first_differing_file():
    ours = fp(code="git abc + changes 111", code_files={"a.py": "1111", "b.py": "2222"})
    theirs = fp(hostname="b", code="git abc + changes 999",
                code_files={"a.py": "1111", "b.py": "3333", "c.py": "4444"})
    verdict = compare({0: ours, 1: theirs})
    assert [(d.field, d.theirs, d.ours) for d in verdict.differences] == [
        ("code", "git abc + changes 999", "git abc + changes 111"),
        ("file b.py", "3333", "2222")]
    assert "file b.py" in mismatch_table(verdict)
    # a file changed on one node only reads "as committed" on the other
    only = compare({0: fp(), 1: fp(code="git abc + changes 5", code_files={"x.py": "5555"})})
    assert [(d.field, d.theirs, d.ours) for d in only.differences][1] == (
        "file x.py", "5555", "as committed")
    # other commits: no file row (the lists are relative to each node's own commit)
    other = compare({0: fp(), 1: fp(code="git def", code_files={"x.py": "5555"})})
    assert [d.field for d in other.differences] == ["code"]


def test_a_modules_code_is_found_without_importing_its_parent_packages(tmp_path, monkeypatch):
    """`-m pkg.sub.train`: the agent hashes pkg/sub/train.py; it must not run pkg's or
    pkg.sub's __init__ (user code, in the launcher) to find it."""
    sub = tmp_path / "mrpkg" / "sub"
    sub.mkdir(parents=True)
    marker = tmp_path / "imported"
    init = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    (tmp_path / "mrpkg" / "__init__.py").write_text(init)
    (sub / "__init__.py").write_text(init)
    (sub / "train.py").write_text("print(1)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    identity = preflight.code_identity("mrpkg.sub.train", module=True)
    assert identity.startswith("file ") and identity != "none"
    assert identity == preflight.code_identity(str(sub / "train.py"))
    assert not marker.exists(), marker.read_text()
    assert preflight.code_identity("mrpkg.sub.nothing", module=True) == "none"
    assert preflight.code_identity("mrpkg.sub.train.x", module=True) == "none"


def test_a_repository_owned_by_another_user_is_not_read_through_git(tmp_path):
    """git refuses a repository another user owns (its config could run commands); meshrun
    must not override that with safe.directory=*: the script's own hash is the identity."""
    import os

    if os.geteuid() != 0:
        import pytest
        pytest.skip("needs root to hand the repository to another user")
    script = _repo(tmp_path)
    subprocess.run(["chown", "-R", "12345:12345", str(tmp_path)], check=True)
    identity = preflight.code_identity(script)
    assert identity.startswith("file "), identity

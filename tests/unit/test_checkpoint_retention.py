"""Checkpoint selection and retention: pure functions of a directory listing (no torch)."""

import random

import pytest

from meshrun.errors import UsageError
from meshrun.worker.checkpoint import (
    Found,
    check_target,
    listing,
    newest_complete,
    parse_listing,
    plan_retention,
    step_dir,
)


def found(*specs: str) -> list[Found]:
    """'4' = complete step-4, '5?' = incomplete step-5."""
    return parse_listing((f"step-{s.rstrip('?')}", not s.endswith("?")) for s in specs)


def names(items) -> list[str]:
    return [f.name for f in items]


def doomed(specs, keep) -> list[str]:
    return [f.name for f, _ in plan_retention(found(*specs), keep)]


def test_only_canonical_step_folders_count_and_sort_numerically():
    listed = [("step-10", True), ("step-9", True), ("step-012", True), ("step-x", True),
              ("latest", True), ("step-3.tmp", False), ("Step-4", True), ("step-", True),
              ("step-0", False), ("tensorboard", False)]
    assert names(parse_listing(listed)) == ["step-0", "step-9", "step-10"]
    assert step_dir(12) == "step-12"


@pytest.mark.parametrize("specs, newest", [
    ((), None),
    (("5?",), None),
    (("2", "4", "6?"), "step-4"),          # a newer save that never finished is skipped
    (("9", "10"), "step-10"),              # numeric, not lexical
    (("3", "1?", "2"), "step-3"),
])
def test_newest_complete(specs, newest):
    best = newest_complete(found(*specs))
    assert (best.name if best else None) == newest


@pytest.mark.parametrize("specs, keep, removed", [
    (("2", "4", "6"), 2, ["step-2"]),
    (("2", "4", "6"), 3, []),
    (("2", "4", "6", "8"), 2, ["step-2", "step-4"]),
    (("2?", "4", "6"), 2, ["step-2"]),             # incomplete, older than step-6
    (("2", "4", "5?", "6"), 3, ["step-5"]),        # incomplete between complete ones
    (("4", "6", "8?"), 2, []),                     # newer incomplete: maybe being written
    (("1?", "2?"), 2, []),                         # nothing complete: touch nothing
    (("6",), 2, []),
])
def test_retention_table(specs, keep, removed):
    assert doomed(specs, keep) == removed


def test_retention_gives_reasons():
    reasons = {f.name: why for f, why in plan_retention(found("1?", "2", "3", "4"), 2)}
    assert "older than the newest 2 complete" in reasons["step-2"]
    assert "incomplete" in reasons["step-1"] and "step-4" in reasons["step-1"]


def test_keep_below_two_is_refused_in_one_line():
    with pytest.raises(UsageError) as err:
        plan_retention(found("1", "2"), 1)
    line = err.value.line()
    assert line.startswith("meshrun: error: checkpoint keep=1 is below 2; fix: ")
    assert "\n" not in line


def test_retention_invariants_over_random_listings():
    rng = random.Random(1234)
    for _ in range(500):
        steps = rng.sample(range(60), rng.randint(0, 12))
        items = found(*(f"{s}{'' if rng.random() < 0.7 else '?'}" for s in steps))
        keep = rng.randint(2, 5)
        removed = {f for f, _ in plan_retention(items, keep)}
        kept = [f for f in items if f not in removed]
        complete = [f for f in items if f.complete]
        newest = newest_complete(items)
        if newest is None:
            assert not removed
            continue
        # the newest complete survives, and so does the newest `keep` complete ones
        assert newest in kept
        assert [f for f in kept if f.complete] == complete[-keep:]
        # incomplete folders newer than the newest complete one are never removed
        assert all(f in kept for f in items if not f.complete and f.step > newest.step)
        # incomplete folders older than it are all removed
        assert all(f in removed for f in items if not f.complete and f.step < newest.step)
        # selection after pruning is unchanged
        assert newest_complete(kept) == newest


def test_check_target_never_overwrites_a_complete_checkpoint():
    items = found("4", "6?")
    assert check_target(items, 8) is False            # new folder
    assert check_target(items, 6) is True             # incomplete: remove it first
    with pytest.raises(UsageError) as err:
        check_target(items, 4, "ckpt/run")
    assert "ckpt/run/step-4 already exists and is complete" in err.value.line()
    assert "fix:" in err.value.line()


def test_listing_reads_folders_and_metadata(tmp_path):
    (tmp_path / "step-4").mkdir()
    (tmp_path / "step-4" / ".metadata").write_text("x")
    (tmp_path / "step-6").mkdir()
    (tmp_path / "step-6" / "__0_0.distcp").write_text("x")
    (tmp_path / "step-8").write_text("a file, not a checkpoint")
    assert sorted(listing(str(tmp_path))) == [("step-4", True), ("step-6", False)]
    assert listing(str(tmp_path / "missing")) == []
    assert names(parse_listing(listing(str(tmp_path)))) == ["step-4", "step-6"]


def test_removal_unmarks_a_checkpoint_before_deleting_its_shards(tmp_path, monkeypatch):
    """A removal cut short (here: rmtree dies at once) leaves an incomplete folder, never a
    complete-looking one with shards missing."""
    from meshrun.worker import checkpoint

    folder = tmp_path / "step-4"
    folder.mkdir()
    (folder / ".metadata").write_text("m")
    (folder / "__0_0.distcp").write_text("x")

    def dies(path, ignore_errors=False):
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint.shutil, "rmtree", dies)
    with pytest.raises(KeyboardInterrupt):
        checkpoint._remove(str(folder))
    assert not (folder / ".metadata").exists() and (folder / "__0_0.distcp").exists()
    assert checkpoint.parse_listing(checkpoint.listing(str(tmp_path)))[0].complete is False
    monkeypatch.undo()
    checkpoint._remove(str(folder))
    assert not folder.exists()


def test_removal_of_a_linked_checkpoint_drops_the_link_only(tmp_path):
    from meshrun.worker import checkpoint

    kept = tmp_path / "archive" / "step-2"
    kept.mkdir(parents=True)
    (kept / ".metadata").write_text("m")
    (kept / "__0_0.distcp").write_text("x")
    (tmp_path / "run").mkdir()
    link = tmp_path / "run" / "step-2"
    link.symlink_to(kept)
    checkpoint._remove(str(link))
    assert not link.exists() and not link.is_symlink()
    assert sorted(p.name for p in kept.iterdir()) == [".metadata", "__0_0.distcp"]


def test_rank0_file_errors_become_one_line(tmp_path):
    """Single process (no process group): rank 0's OSError is the one-line UsageError every
    rank would raise; its result is returned as is."""
    from meshrun.errors import UsageError
    from meshrun.worker import checkpoint

    assert checkpoint._rank0_does(lambda: 7, str(tmp_path), "read it") == 7

    def fails():
        raise PermissionError(13, "Permission denied")

    with pytest.raises(UsageError) as caught:
        checkpoint._rank0_does(fails, str(tmp_path), "read it")
    line = caught.value.line()
    assert f"checkpoint.dir {tmp_path}: cannot read it (Permission denied)" in line
    assert "fix: " in line


def test_node_0_reads_the_newest_complete_checkpoint_of_recipes_hf_and_lightning(tmp_path):
    """What a shrunk job's admission waits for: a newer complete checkpoint, in the layout
    of meshrun's recipes, an HF Trainer's output_dir or a Lightning ModelCheckpoint folder;
    what is not whole yet does not count."""
    from meshrun.worker.checkpoint import newest_in_any_layout

    assert newest_in_any_layout(str(tmp_path / "missing")) == -1
    (tmp_path / "checkpoint-40").mkdir()                      # HF, still being written
    (tmp_path / "tmp-checkpoint-60").mkdir()                  # HF >= 4.36, not renamed yet
    (tmp_path / "step-80").mkdir()                            # a recipe's, no metadata yet
    (tmp_path / "last.ckpt").write_text("x")                  # Lightning's copy: no step
    assert newest_in_any_layout(str(tmp_path)) == -1
    (tmp_path / "checkpoint-40" / "trainer_state.json").write_text("{}")
    assert newest_in_any_layout(str(tmp_path)) == 40
    (tmp_path / "epoch=1-step=70.ckpt").write_text("x")
    assert newest_in_any_layout(str(tmp_path)) == 70
    (tmp_path / "step-80" / ".metadata").write_text("")
    assert newest_in_any_layout(str(tmp_path)) == 80
    (tmp_path / "step=90.ckpt").mkdir()                       # a folder is no Lightning file
    assert newest_in_any_layout(str(tmp_path)) == 80


def test_a_scripts_checkpoints_are_watched_only_where_the_user_named_the_folder(
        tmp_path, monkeypatch):
    """A script run with --checkpoint-dir: node 0 reads that folder (a node that came back
    is seated at the next checkpoint); without it meshrun does not know where the script
    saves, and seats such a node at once (None)."""
    import time

    from meshrun.harness import clean_env
    from meshrun.plan.model import Command
    from meshrun.runtime.planning import job_input, plan_here
    from meshrun.runtime.supervise import _newest_checkpoint
    from meshrun.topology import Flags

    monkeypatch.delenv("MESHRUN_CHECKPOINT_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "train.py"
    script.write_text("")
    (tmp_path / "out" / "checkpoint-30").mkdir(parents=True)
    (tmp_path / "out" / "checkpoint-30" / "trainer_state.json").write_text("{}")

    def newest(**given):
        job, cmd = job_input(Command(str(script)), **given)
        read = _newest_checkpoint(plan_here(clean_env(), Flags(), cmd, job))
        first = read()
        deadline = time.monotonic() + 10
        while read() == -2 and time.monotonic() < deadline:   # listed on its own thread
            time.sleep(0.05)
        return first, read()

    first, then = newest(checkpoint_dir="out")
    # the folder is listed on a thread: the first answer is "not read yet" (-2), or already
    # step 30 when the listing beat the call (it did once in a fresh-clone run); then 30
    assert first in (-2, 30) and then == 30, (first, then)
    assert newest(sets=["train.steps=5"]) == (None, None)     # no folder named: at once
    assert newest() == (None, None)

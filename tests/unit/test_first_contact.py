"""What a new user meets first (issue 11): declared dependencies, simulate's thread share,
whole log lines, one-worker wording, the GPU count a render infers, and the diagnosis a node
gives of its own files."""

from __future__ import annotations

import ast
import io
import logging
import re
import sys
from pathlib import Path

import pytest
from unit_fakes import CPU_HOST

from meshrun.diagnose import diagnose_text
from meshrun.facts import HostFacts
from meshrun.plan import brief, describe, make_plan, rank_span, ranks_phrase, threads_for
from meshrun.render.spec import infer_gpus, render_platform, spec_from_flags
from meshrun.runtime.logs import LogRouter, drop_empty_stacks, settle
from meshrun.runtime.rundir import set_aside
from meshrun.topology import Flags

ROOT = Path(__file__).resolve().parents[2]
TWO = Flags(nnodes="2", node_rank="1", master_addr="127.0.0.1", master_port="29500")


# --- dependencies -------------------------------------------------------------------------

def _declared() -> set[str]:
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {re.split(r"[<>=!~; \[]", dep, maxsplit=1)[0].lower()
            for dep in data["project"]["dependencies"]}


def _third_party_imports() -> dict[str, set[str]]:
    """Top-level modules the package imports that are neither stdlib nor meshrun, with the
    files importing them; an import inside ``try: ... except ImportError`` is optional."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "src" / "meshrun").rglob("*.py"):
        tree = ast.parse(path.read_text())
        optional = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try)
                    and any(isinstance(h.type, ast.Name) and h.type.id in
                            ("ImportError", "ModuleNotFoundError") for h in t.handlers)
                    for n in ast.walk(t)}
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0
                     and node.module else [])
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "meshrun" \
                        and id(node) not in optional:
                    found.setdefault(top, set()).add(path.name)
    return found


DISTRIBUTION = {"yaml": "pyyaml", "tomli": "tomli", "torch": "torch", "numpy": "numpy"}


def test_every_module_the_package_imports_is_declared():
    declared = _declared()
    for module, files in _third_party_imports().items():
        assert DISTRIBUTION.get(module, module) in declared, (module, sorted(files))


def test_numpy_is_declared_where_object_collectives_are_used():
    """torch's wheel does not bring numpy; its object collectives need it (the quick start
    once failed with "Numpy is not available" in an empty virtual environment)."""
    users = [p.name for p in (ROOT / "src" / "meshrun").rglob("*.py")
             if re.search(r"\b(broadcast_object_list|all_gather_object|gather_object|"
                          r"scatter_object_list)\b", p.read_text())]
    assert users, "no object collective left: this guard may go"
    assert "numpy" in _declared(), users


def test_the_ci_reads_the_readme_commands_it_runs():
    sys.path.insert(0, str(ROOT / ".ci"))
    try:
        from fresh_machine import readme_commands
    finally:
        sys.path.pop(0)
    first, second = readme_commands()
    assert "meshrun simulate" in first and "pip install" in first
    assert second == "./scripts/test.sh"


# --- simulate's share of the CPUs -----------------------------------------------------------

@pytest.mark.parametrize("cpus, workers, threads", [(2, 2, "1"), (2, 4, "1"), (16, 4, "4"),
                                                    (16, 3, "5"), (1, 64, "1")])
def test_simulated_workers_share_the_host(cpus, workers, threads):
    var = threads_for({}, 1, cpus, workers, 2)
    assert var is not None and var.value == threads
    assert f"max(1, {cpus} // {workers}) = {threads}" in var.reason


def test_run_keeps_torchruns_rule_and_the_users_value():
    assert threads_for({}, 1, 16, 0, 2) is None               # one worker: torch's default
    assert threads_for({}, 8, 16, 0, 2).value == "1"          # several: torchrun's 1
    assert threads_for({"OMP_NUM_THREADS": "3"}, 8, 16, 4, 2) is None  # the user's, kept


def test_plan_says_the_simulated_share():
    plan = make_plan({}, TWO, HostFacts(hostname="h", cpus=8), simulated_workers=4)
    assert plan.env_dict()["OMP_NUM_THREADS"] == "2"
    assert plan.simulated_workers == 4 and plan.to_json()["simulated_workers"] == 4
    assert "4 workers of 2 simulated nodes share this host's 8 CPUs" in describe(plan)
    assert "OMP_NUM_THREADS" not in make_plan({}, TWO, HostFacts(hostname="h", cpus=8)).env_dict()


# --- wording --------------------------------------------------------------------------------

def test_one_worker_is_one_rank_not_a_range():
    assert ranks_phrase((1,)) == "rank 1" and ranks_phrase((8, 9, 10)) == "ranks 8-10"
    assert rank_span((3,)) == "3"
    assert "global ranks       : 1 " in describe(make_plan({}, TWO, CPU_HOST))


# --- the short banner ----------------------------------------------------------------------

def test_the_short_banner_says_who_what_and_where_and_keeps_the_warnings():
    """By default a node prints a few lines (the whole plan goes to its log): which node on
    which host, its ranks, the command (redacted), the log folder, and every warning."""
    plan = make_plan({}, TWO, HostFacts(hostname="gpu-b", cpus=8))
    text = brief(plan, "logs/x/node1.log")
    lines = text.splitlines()
    assert lines[0].startswith("meshrun ") and ": node 1 of 2 on gpu-b (platform: " in lines[0]
    assert "1 worker: rank 1 of 2, CPU, gloo; run id " in lines[0]
    assert lines[-1].startswith("  logs    : ") and "logs/x/node1.log; --verbose" in lines[-1]
    assert len(lines) == 2 + len(plan.warnings) + bool(plan.world_size_reading)  # no command
    seeds = make_plan({"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "10.0.0.1"}, Flags(),
                      HostFacts(hostname="gpu-b", cpus=8))
    assert "  reading : WORLD_SIZE read as nodes" in brief(seeds, "node1.log")
    assert len(lines) < len(describe(plan).splitlines()) / 3


def test_diagnose_learns_the_host_of_each_rank_from_the_short_banner():
    """A console capture (kubectl logs, a SLURM output file) has only the short banner: the
    ranks' host still comes from it."""
    plan = make_plan({}, TWO, HostFacts(hostname="gpu-b", cpus=8))
    console = brief(plan, "logs/x/node1.log") + "\n" + (
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 0 has a total capacity of 79.1 GiB of which 1.2 GiB is free.\n")
    (found,) = [d for d in diagnose_text(console) if d.code == "cuda-oom"]
    assert (found.rank, found.host) == (1, "gpu-b")


# --- whole lines from torch's tailer ----------------------------------------------------------

@pytest.mark.parametrize("raw, shown", [
    ("plain", "plain"), ("\r 10%|#\r 50%|#####\r100%|##########| 10/10", "100%|##########| 10/10"),
    ("done\r", "done"), ("a\r\r", "a"), ("\r", "")])
def test_settle_keeps_what_a_terminal_shows(raw, shown):
    assert settle(raw) == shown


def _router(tmp_path):
    router = LogRouter(str(tmp_path), 0, (0, 1))
    console = io.StringIO()
    saved = sys.stdout
    router.install()
    tee = sys.stdout
    sys.stdout = saved
    tee._console = console  # the tee's console, captured
    return router, tee, console


def test_partial_worker_lines_are_joined_and_prefixed_once(tmp_path):
    router, tee, console = _router(tmp_path)
    try:
        # torch's tailer: "[rankN]: " + whatever it read, partial lines included
        for chunk in ("[rank0]: step 1 of", "[rank1]: hello\n", "[rank0]:  2\n",
                      "[rank0]: \r 10%|#", "[rank0]: \r100%|##| 2/2\n",
                      "[rank1]: [rank1]: Traceback (most recent call last):\n",
                      "[rank1]: no newline at the end"):
            tee.write(chunk)
        tee.write("meshrun: own line\n")
    finally:
        tee.finish()
        router.close()
    shown = console.getvalue().splitlines()
    # the console also saw the bar's state while it was redrawn (" 10%|#"); the logs did not
    assert shown == ["[rank1]: hello", "[rank0]: step 1 of 2", "[rank0]:  10%|#",
                     "[rank0]: 100%|##| 2/2", "[rank1]: Traceback (most recent call last):",
                     "meshrun: own line", "[rank1]: no newline at the end"]
    assert (tmp_path / "rank0.log").read_text() == "step 1 of 2\n100%|##| 2/2\n"
    assert (tmp_path / "rank1.log").read_text().splitlines() == [
        "hello", "Traceback (most recent call last):", "no newline at the end"]
    assert "[rank0]: step 1 of 2" in (tmp_path / "node0.log").read_text()


def test_meshruns_own_lines_carry_the_time_in_the_node_log_and_with_timestamps_on_the_console(
        tmp_path):
    """The node log stamps meshrun's own lines (UTC, RFC 3339), never a worker's; the
    console only with --timestamps; diagnose reads the stamped log as before."""
    stamped = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")
    for timestamps in (False, True):
        folder = tmp_path / str(timestamps)
        router = LogRouter(str(folder), 0, (0, 1), timestamps=timestamps)
        console = io.StringIO()
        saved = sys.stdout
        router.install()
        tee, sys.stdout = sys.stdout, saved
        tee._console = console
        try:
            tee.write("meshrun: rank 0 on node 0 (gpu-a) exited with code 1\n")
            tee.write("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                      "2.00 GiB\n")
        finally:
            tee.finish()
            router.close()
        own, worker = (folder / "node0.log").read_text().splitlines()
        assert stamped.match(own) and own.endswith("meshrun: rank 0 on node 0 (gpu-a) exited "
                                                   "with code 1"), own
        assert worker == ("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to "
                          "allocate 2.00 GiB")
        shown = console.getvalue().splitlines()
        assert bool(stamped.match(shown[0])) is timestamps and not stamped.match(shown[1])
        assert (folder / "rank0.log").read_text() == ("torch.OutOfMemoryError: CUDA out of "
                                                      "memory. Tried to allocate 2.00 GiB\n")
        (found,) = diagnose_text((folder / "node0.log").read_text())
        assert (found.code, found.rank, found.host) == ("cuda-oom", 0, "gpu-a")


def test_a_bar_redrawn_for_hours_is_held_as_its_latest_state(tmp_path):
    """Redraws without a newline pile up: only the latest is held, so a bar running for
    hours never spills a 64 KB line into the logs; its last state is what the log keeps."""
    router, tee, console = _router(tmp_path)
    try:
        for i in range(20000):                       # about 300 KB of redraws
            tee.write(f"[rank0]: \r{i % 100:3d}%|####| {i}/20000")
        tee.write("[rank0]: \n")
    finally:
        tee.finish()
        router.close()
    assert (tmp_path / "rank0.log").read_text() == " 99%|####| 19999/20000\n"
    assert len(console.getvalue().splitlines()) <= 3   # at most one echo a second


def test_the_tail_survives_a_console_that_refuses_a_write(tmp_path, monkeypatch):
    """A closed pipe or an encoding the console cannot take: the tail says so once and goes
    on; handing on the last lines never raises into the launcher (it would replace the
    run's outcome)."""
    from meshrun.runtime.logs import WorkerTail

    class Refusing:
        def write(self, text):
            raise UnicodeEncodeError("latin-1", text, 0, 1, "cannot encode")

    out = tmp_path / "rank0.stdout"
    out.write_text("\u2588 one\n")
    tail = WorkerTail()
    tail.add(str(out), 0, "stdout")
    said = io.StringIO()
    monkeypatch.setattr(sys, "stdout", Refusing())
    monkeypatch.setattr(sys, "__stderr__", said)
    tail.drain()
    with out.open("a") as handle:
        handle.write("two\n")
    tail.drain()
    tail.finished()                                  # no exception, files let go
    assert said.getvalue().count("meshrun: warning: the workers' output could not be "
                                 "shown (UnicodeEncodeError") == 1, said.getvalue()
    assert tail._files == []


def test_a_worker_line_never_lands_inside_meshruns_own(tmp_path):
    """print() writes its text and its newline separately: a worker's line arriving between
    them goes to the worker's log, whole, not into meshrun's line."""
    router, tee, console = _router(tmp_path)
    try:
        tee.write("meshrun: waiting")
        tee.write("[rank0]: a worker line\n")
        tee.write("\n")
    finally:
        tee.finish()
        router.close()
    assert console.getvalue().splitlines() == ["[rank0]: a worker line", "meshrun: waiting"]
    assert (tmp_path / "rank0.log").read_text() == "a worker line\n"
    assert "meshrun: waiting\n" in (tmp_path / "node0.log").read_text()


def test_a_redrawn_bar_reaches_the_console_at_most_once_a_second(tmp_path):
    router, tee, console = _router(tmp_path)
    try:
        for pct in range(0, 100, 10):
            tee.write(f"[rank0]: \r{pct:3d}%")  # ten redraws within a few microseconds
        tee.write("[rank0]: \r100%\n")
    finally:
        tee.finish()
        router.close()
    assert console.getvalue().splitlines() == ["[rank0]:   0%", "[rank0]: 100%"]
    assert (tmp_path / "rank0.log").read_text() == "100%\n"


def test_a_secret_split_across_chunks_is_still_redacted(tmp_path):
    router, tee, console = _router(tmp_path)
    try:
        tee.write("[rank0]: token hf_abcdefghij")
        tee.write("[rank0]: klmnopqrstuvwxyz0123 used\n")
    finally:
        tee.finish()
        router.close()
    assert "hf_abcdefghijklmnop" not in console.getvalue()
    assert "hf_abcdefghijklmnop" not in (tmp_path / "rank0.log").read_text()


def test_empty_stack_files_go_and_a_dump_stays(tmp_path):
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "rank0.txt").write_text("")
    (stacks / "rank1.txt").write_text("Thread 0x1 (most recent call first):\n")
    (stacks / "rank2.txt").write_text("")  # another node's: not ours to remove
    drop_empty_stacks(str(tmp_path), (0, 1))
    assert sorted(p.name for p in stacks.iterdir()) == ["rank1.txt", "rank2.txt"]
    (stacks / "rank1.txt").unlink()
    drop_empty_stacks(str(tmp_path), (2,))
    assert not stacks.exists()


def _run_files(folder: Path, node: int, ranks: tuple[int, ...], tag: str) -> None:
    """What one node leaves in a shared run folder (tag: which run wrote it)."""
    for name in (f"node{node}.log", f"plan.node{node}.json", f"env.node{node}.json",
                 f"diagnosis.node{node}.json", f"cause.node{node}.json",
                 *(f"rank{r}.log" for r in ranks), *(f"failures/rank{r}.json" for r in ranks),
                 f"raw/node{node}-20261127-000000/attempt0/rank{ranks[0]}.stdout",
                 *(["node_steps.json"] if node == 0 else [])):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(tag)


def test_a_rerun_moves_each_nodes_earlier_files_into_one_folder_per_run(tmp_path):
    """issue 23: a rerun renamed the earlier run's files with four different timestamps and
    left node_steps.json to be overwritten; now each node moves its own files into
    earlier/<n>/, the same n on every node, and the plain names are free for the new run."""
    for node, ranks in ((0, (0, 1)), (1, (2, 3))):
        _run_files(tmp_path, node, ranks, "run 1")
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')       # the script's: stays
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "rank1.txt").write_text("")                # killed outright: empty
    (tmp_path / "stacks" / "rank2.txt").write_text("Thread 0x1 (most recent call first):\n")
    # node 1 first (nodes start in any order), each touching only its own files
    assert set_aside(str(tmp_path), 1, (2, 3)) == str(tmp_path / "earlier" / "1")
    assert (tmp_path / "node0.log").read_text() == "run 1"              # node 0's: not touched
    assert set_aside(str(tmp_path), 0, (0, 1)) == str(tmp_path / "earlier" / "1")
    first = tmp_path / "earlier" / "1"
    assert sorted(p.name for p in first.iterdir()) == sorted(
        ["node0.log", "node1.log", "plan.node0.json", "plan.node1.json", "env.node0.json",
         "env.node1.json", "diagnosis.node0.json", "diagnosis.node1.json", "cause.node0.json",
         "cause.node1.json", "rank0.log", "rank1.log", "rank2.log", "rank3.log",
         "node_steps.json", "failures", "raw", "stacks"])
    assert (first / "stacks" / "rank2.txt").read_text().startswith("Thread")
    assert not (first / "stacks" / "rank1.txt").exists()               # an empty one is dropped
    assert sorted(p.name for p in tmp_path.iterdir()) == ["earlier", "metrics.jsonl"]
    # the second rerun: earlier/2, and nothing of run 1 is touched
    for node, ranks in ((0, (0, 1)), (1, (2, 3))):
        _run_files(tmp_path, node, ranks, "run 2")
    assert set_aside(str(tmp_path), 0, (0, 1)) == str(tmp_path / "earlier" / "2")
    assert set_aside(str(tmp_path), 1, (2, 3)) == str(tmp_path / "earlier" / "2")
    assert (first / "node_steps.json").read_text() == "run 1"
    assert (tmp_path / "earlier" / "2" / "node_steps.json").read_text() == "run 2"
    assert set_aside(str(tmp_path), 0, (0, 1)) is None                 # nothing left to move


def test_torchs_agent_lines_that_meshrun_says_itself_are_dropped():
    from meshrun.runtime.agent_output import quiet_agent_lines as _quiet_agent_lines

    _quiet_agent_lines()
    _quiet_agent_lines()  # once only
    logger = logging.getLogger("torch.distributed.elastic.multiprocessing.api")
    assert sum(type(f).__name__ == "_SaidByMeshrun" for f in logger.filters) == 1

    def passes(msg: str) -> bool:
        return logger.filter(logging.LogRecord(logger.name, logging.ERROR, "api.py", 1, msg,
                                               (), None))

    assert not passes("failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s")
    assert not passes("Sending process %s closing signal %s")
    assert passes("Unable to shutdown process %s via %s, forcefully exiting via %s")


# --- render: the GPUs a node requests -----------------------------------------------------------

def test_several_processes_without_a_gpu_count_request_one_gpu_each():
    spec = spec_from_flags("k8s", ["train.py"], nnodes="2", nproc_per_node="8", image="img")
    assert spec.gpus_per_node == 8
    assert "each node requests 8 GPUs" in spec.notes[0] and "--gpus-per-node 0" in spec.notes[0]
    text = render_platform(spec)
    assert "nvidia.com/gpu: '8'" in text and "--gpus-per-node 8" in text.splitlines()[1]


def test_a_cpu_job_is_said_and_regenerates_as_one():
    spec = spec_from_flags("k8s", ["train.py"], nnodes="2", nproc_per_node="8",
                           gpus_per_node="0", image="img")
    assert spec.gpus_per_node == 0 and not any("--gpus-per-node" in n for n in spec.notes)
    assert "--gpus-per-node 0 --nproc-per-node 8" in render_platform(spec).splitlines()[1]
    assert infer_gpus(None, None, 0, 1)[1][0].startswith("--gpus-per-node not given: a CPU job")
    assert infer_gpus("4", "2", 4, 2) == (4, ())


# --- diagnosis: the plan's device, a node's own files ----------------------------------------

CUDA_ON_CPU = "[rank0]: AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'\n"


@pytest.mark.parametrize("device, cause, fix", [
    ("cpu", "meshrun planned a CPU run", "MESHRUN_BACKEND"),
    ("cuda", "on a node where meshrun found GPUs", "install a CUDA build"),
    (None, "either the node has no GPU", "on a GPU node, install a CUDA build")])
def test_cuda_on_a_cpu_torch_follows_the_plan(device, cause, fix):
    (found,) = diagnose_text(CUDA_ON_CPU, device=device)
    assert found.code == "cuda-on-cpu-torch" and cause in found.cause and fix in found.fix


def test_a_run_folder_gives_its_planned_device(tmp_path):
    (tmp_path / "rank0.log").write_text(CUDA_ON_CPU.removeprefix("[rank0]: "))
    (tmp_path / "plan.node0.json").write_text('{"device": "cpu"}')
    from meshrun.diagnose import diagnose_files

    (found,) = diagnose_files([tmp_path])
    assert "meshrun planned a CPU run" in found.cause


def test_an_earlier_diagnosis_in_the_log_is_not_evidence():
    text = ("meshrun: diagnosis: rank 3 on vm: unknown failure — an error no signature knows: "
            "RuntimeError: Numpy is not available; fix: read the traceback\n")
    assert diagnose_text(text) == []


def test_a_node_diagnoses_its_own_files_only(tmp_path):
    from meshrun.reports.bundle import node_logs

    plan = make_plan({}, TWO, CPU_HOST)
    plan = type(plan)(**{**plan.__dict__, "log_dir": str(tmp_path)})
    for name in ("node0.log", "node1.log", "rank0.log", "rank1.log"):
        (tmp_path / name).write_text("x\n")
    assert [Path(p).name for p in node_logs(plan)] == ["node1.log", "rank1.log"]


def test_a_rank_log_continued_in_a_new_membership_epoch_says_so_and_the_seat_counts_as_run(
        tmp_path):
    """A spare (node 2, no ranks of its own) takes seat 1 in epoch 1: the rank logs it
    continues (the lost node's, in a shared log folder) get one line before its output, and
    the ranks it ran are what its diagnosis and stack clean-up look at."""
    (tmp_path / "rank2.log").write_text("lost node's line\n")
    router = LogRouter(str(tmp_path), 2, ())
    try:
        assert router.ranks_run() == ()
        router.begin_epoch(1, (2, 3))
        for line in ("[rank2]: resumed at step 25", "[rank3]: resumed", "[rank2]: step 26"):
            router.route(line)
        assert router.ranks_run() == (2, 3)
    finally:
        router.close()
    assert (tmp_path / "rank2.log").read_text().splitlines() == [
        "lost node's line",
        "--- meshrun: membership epoch 1: this rank runs on node 2 from here on ---",
        "resumed at step 25", "step 26"]
    assert (tmp_path / "rank3.log").read_text().splitlines()[0].startswith(
        "--- meshrun: membership epoch 1:")


def test_simulate_relays_a_nodes_lines_with_the_time_first_when_asked(capsys):
    """`simulate --timestamps` stamps what it relays (the nodes do not: node 1's banner is
    left out by how its lines begin, which a stamp would change)."""
    import threading
    from types import SimpleNamespace

    from meshrun.runtime.simulate import _relay

    lines = ("meshrun 0.1.0: node 1 of 2 on h (platform: manual), 1 worker: rank 1 of 2\n"
             "  command : train.py\nmeshrun: all 2 nodes joined\n[rank1]: hello\n")
    for timestamps in (False, True):
        _relay(SimpleNamespace(stdout=io.StringIO(lines)), 1, threading.Lock(), timestamps)
        shown = capsys.readouterr().out.splitlines()
        assert [line.split("Z ", 1)[-1] for line in shown] == [
            "[node 1] meshrun: all 2 nodes joined", "[rank1]: hello"], shown
        assert bool(re.match(r"\d{4}-\d\d-\d\dT[\d:.]+Z \[node 1\] ", shown[0])) is timestamps
        assert shown[1] == "[rank1]: hello"


def test_a_restart_torch_does_not_count_gets_files_of_its_own(tmp_path):
    """torch's agent restarts workers for a membership change without counting it: the same
    TORCHELASTIC_RESTART_COUNT again. Its workers get new files (the old ones rewritten
    would be tailed twice: a REPORT line came twice in one CI run)."""
    from meshrun.runtime.agent_output import worker_logs_spec

    tailed: list[str] = []
    router = type("Router", (), {"tail": lambda self, path, rank, stream: tailed.append(path)})()
    spec = worker_logs_spec(str(tmp_path), 0, router)
    envs = {0: {"RANK": "0", "TORCHELASTIC_RESTART_COUNT": "0"}}
    first = spec.reify(envs).stdouts[0]
    again = spec.reify({0: {"RANK": "0", "TORCHELASTIC_RESTART_COUNT": "0"}}).stdouts[0]
    counted = spec.reify({0: {"RANK": "0", "TORCHELASTIC_RESTART_COUNT": "1"}}).stdouts[0]
    assert first.endswith("attempt0/rank0.stdout") and again.endswith("attempt0-2/rank0.stdout")
    assert counted.endswith("attempt1/rank0.stdout")
    assert len(tailed) == len(set(tailed)) == 6


def test_after_a_signal_from_outside_the_workers_lines_stay_in_the_rank_logs(tmp_path):
    """SIGTERM to `meshrun run`: torch's agent logs its "death signal" line, then stops the
    workers; a rank whose peer went first raises Gloo's 'Connection reset by peer'. That
    traceback is the stopping, not the job's failure: after one line saying where the rest
    goes, the console stays quiet (the rank log keeps it). What the workers wrote before the
    signal is handed on first (their redirect files are read to the end), then shown."""
    import logging

    from meshrun.runtime.agent_output import _SaidByMeshrun

    router, tee, console = _router(tmp_path)
    saved = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = tee   # the workers' lines and meshrun's go through it, as in a run
    raw = tmp_path / "rank1.stdout"
    raw.write_text("step 3\n")   # written before the signal, not read yet
    try:
        router.tail(str(raw), 1, "stdout")
        record = logging.LogRecord("torch.distributed.elastic.agent.server.api", logging.WARNING,
                                   __file__, 1, "Received %s death signal, shutting down workers",
                                   ("Signals.SIGTERM",), None)
        assert _SaidByMeshrun(router).filter(record) is False      # meshrun says it itself
        tee.write("[rank1]: Traceback (most recent call last):\n")
        tee.write("[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
                  "Read error [127.0.0.1]:45678: Connection reset by peer\n")
        tee.write("meshrun: node 0 stopped by SIGTERM; its workers were stopped\n")
        router.show_workers()      # a new epoch's workers (the launcher's loop): shown again
        tee.write("[rank1]: resumed at step 4\n")
    finally:
        sys.stdout, sys.stderr = saved
        router.drain_workers()
        tee.finish()
        router.close()
    shown = console.getvalue()
    assert "[rank1]: step 3" in shown and "stopped by SIGTERM" in shown
    assert shown.index("[rank1]: step 3") < shown.index("workers are being stopped")
    assert "Traceback" not in shown and "Connection reset" not in shown
    assert "[rank1]: resumed at step 4" in shown
    kept = (tmp_path / "rank1.log").read_text()
    assert "step 3" in kept and "Traceback" in kept and "Connection reset by peer" in kept

"""The worker shim's observer (meshrun.worker.observe): collectives counted over every process
group, whoever issued them; the work share from the kernel's accounting (gloo) or NCCL's
completion hooks; the writer's reports; the straggler rule and the hang check on them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import timedelta
from types import SimpleNamespace

import pytest
from helpers import free_port

from meshrun import protocol
from meshrun.runtime.stragglers import WORK, Stragglers
from meshrun.worker.observe import Observer, WorkThreads, schedstat


class Group:
    def __init__(self, seq: int, backend: str = "gloo"):
        self.seq, self.backend, self.hooks = seq, backend, []

    def _get_sequence_number_for_group(self):
        return self.seq

    def _register_on_completion_hook(self, hook):
        if self.backend != "nccl":
            raise RuntimeError("only NCCL")
        self.hooks.append(hook)


def _dist(*pgs: Group):
    world = SimpleNamespace(pg_map={pg: None for pg in pgs})
    return SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                           distributed_c10d=SimpleNamespace(_world=world),
                           get_backend=lambda pg: pg.backend)


def test_collectives_are_counted_over_every_group_and_the_work_share_is_the_kernels():
    clock, cpu = [100.0], [(1.0, 0.5)]
    observer = Observer(clock=lambda: clock[0], stat=lambda: cpu[0])
    dp, tp = Group(10), Group(40)
    dist = _dist(dp, tp)
    assert observer.sample(dist) == (50, -1.0, 0)    # the first sample: no interval yet
    dp.seq, tp.seq = 12, 48
    clock[0], cpu[0] = 102.0, (1.6, 0.9)             # 2 s: 0.6 s on a CPU, 0.4 s waiting for one
    assert observer.sample(dist) == (60, pytest.approx(0.5), 2)   # 2 active seconds
    clock[0] = 104.0                                 # blocked 2 s (in a collective): the share
    assert observer.sample(dist) == (60, pytest.approx(1.0 / 4), 2)   # spans the last 4 s
    clock[0], cpu[0] = 105.0, (2.0, 0.9)             # 0.4 s of 1: waiting more than working
    assert observer.sample(dist) == (60, pytest.approx(1.4 / 5), 2)
    clock[0], cpu[0] = 110.0, (4.5, 0.9)             # at most SPAN_S: from 105 on
    assert observer.sample(dist) == (60, pytest.approx(2.5 / 5), 7)


def test_on_nccl_with_timing_the_work_share_is_the_time_outside_collectives_on_the_device():
    clock = [0.0]
    observer = Observer(clock=lambda: clock[0], stat=lambda: (0.0, 0.0), timing=True)
    pg = Group(3, backend="nccl")
    dist = _dist(pg)
    observer.sample(dist)
    assert len(pg.hooks) == 1                        # hooked once
    for seconds in (0.3, 0.5):                       # NCCL's watchdog thread, per collective
        pg.hooks[0](SimpleNamespace(active_duration=timedelta(seconds=seconds)))
    clock[0] = 2.0
    coll, share, active = observer.sample(dist)
    assert share == pytest.approx(1 - 0.8 / 2) and len(pg.hooks) == 1
    assert active == -1          # a CPU spinning in the device's synchronisation says nothing


def test_on_nccl_by_default_collectives_are_counted_and_no_share_is_guessed():
    """Without MESHRUN_OBSERVE=timing no hook is registered (its cost: bench/gpu_observe.py)
    and the CPU's figures are not used either (a rank waiting for the device spins)."""
    clock, cpu = [0.0], [(0.0, 0.0)]
    observer = Observer(clock=lambda: clock[0], stat=lambda: cpu[0])
    pg = Group(3, backend="nccl")
    dist = _dist(pg)
    observer.sample(dist)
    pg.seq, clock[0], cpu[0] = 9, 2.0, (2.0, 0.0)         # a CPU busy the whole time
    assert observer.sample(dist) == (9, -1.0, -1) and pg.hooks == []


def test_no_process_group_no_sample():
    dist = SimpleNamespace(is_available=lambda: True, is_initialized=lambda: False)
    assert Observer().sample(dist) is None


def test_this_threads_schedstat_reads():
    run, waiting = schedstat()
    assert run > 0 and waiting >= 0
    assert schedstat("/proc/self/no-such-file") is None


def _thread(task, tid, name, run_ns, wait_ns):
    folder = task / str(tid)
    folder.mkdir(exist_ok=True)
    (folder / "comm").write_text(name + "\n")
    (folder / "schedstat").write_text(f"{run_ns} {wait_ns} 7\n")


def test_the_work_is_the_main_threads_and_gloos_and_never_falls(tmp_path):
    """The main thread (the process's own id) and gloo's named threads count; torch's
    intra-op threads and meshrun's own do not. A thread that ends takes nothing back; a
    new one brings all of its time."""
    task = tmp_path / "task"
    task.mkdir()
    _thread(task, 100, "pt_main_thread", 1_000_000_000, 100_000_000)
    _thread(task, 101, "pt_gloo_runloop", 500_000_000, 0)
    _thread(task, 102, "gloo_tcp_loop", 200_000_000, 50_000_000)
    _thread(task, 103, "python", 9_000_000_000, 0)            # an intra-op or meshrun thread
    work = WorkThreads(str(task), main=100)
    assert work() == (pytest.approx(1.7), pytest.approx(0.15))
    _thread(task, 100, "pt_main_thread", 1_500_000_000, 100_000_000)   # +0.5 s
    for name in ("comm", "schedstat"):
        (task / "101" / name).unlink()
    (task / "101").rmdir()                                    # its group destroyed
    _thread(task, 104, "pt_gloo_runloop", 300_000_000, 0)      # a new group's
    assert work() == (pytest.approx(2.5), pytest.approx(0.15))
    for name in ("comm", "schedstat"):
        (task / "100" / name).unlink()
    assert work() is None                                     # no main thread to read
    assert WorkThreads(str(tmp_path / "none"))() is None


def test_a_thread_that_names_itself_late_or_a_reused_id_still_counts(tmp_path):
    """A gloo thread listed before it named itself (it carried its creator's name) counts
    once it has; an id reused by a new thread brings the new thread's whole time."""
    task = tmp_path / "task"
    task.mkdir()
    _thread(task, 100, "pt_main_thread", 0, 0)
    _thread(task, 101, "pt_main_thread", 100_000_000, 0)     # not named yet
    work = WorkThreads(str(task), main=100)
    assert work() == (0.0, 0.0)
    _thread(task, 101, "pt_gloo_runloop", 300_000_000, 0)    # named now: all of its time
    assert work() == (pytest.approx(0.3), 0.0)
    _thread(task, 101, "gloo_tcp_loop", 50_000_000, 0)       # the id reused by a new thread
    assert work() == (pytest.approx(0.35), 0.0)


def test_a_real_gloo_groups_threads_are_found():
    """torch names gloo's threads as GLOO_THREADS expects (were they renamed, the work
    would silently be the main thread's alone again)."""
    code = textwrap.dedent("""
        import os, sys
        import torch, torch.distributed as dist
        from meshrun.worker.observe import GLOO_THREADS
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}",
                                rank=0, world_size=1)
        dist.all_reduce(torch.ones(1000))
        import time
        deadline = time.monotonic() + 10   # a thread names itself a moment after it starts
        while True:
            names = {open(f"/proc/self/task/{t}/comm").read().strip()
                     for t in os.listdir("/proc/self/task")}
            if {"pt_gloo_runloop", "gloo_tcp_loop"} <= names or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        print(sorted(n for n in names if n.startswith(GLOO_THREADS)))
        dist.destroy_process_group()
    """)
    out = subprocess.run([sys.executable, "-c", code, str(free_port())], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "pt_gloo_runloop" in out.stdout and "gloo_tcp_loop" in out.stdout, out.stdout


DDP = textwrap.dedent("""
    import sys
    import torch, torch.distributed as dist
    from meshrun.worker.observe import collectives, groups
    rank, port = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
    seen = []                                        # what a Python wrapper would see
    for name in ("all_reduce", "broadcast", "all_gather"):
        real = getattr(dist, name)
        setattr(dist, name, lambda *a, _real=real, **k: (seen.append(1), _real(*a, **k))[1])
    before = collectives(groups(dist))
    for _ in range(3):
        model(torch.randn(8, 64)).sum().backward()   # DDP's all-reduce, issued from C++
    print("counted", collectives(groups(dist)) - before, "wrapper", len(seen), flush=True)
    dist.barrier()
    dist.destroy_process_group()
""")


def test_ddps_own_collectives_from_cpp_are_counted():
    """A Python wrapper of torch.distributed.all_reduce never sees DDP's gradient
    all-reduces (its reducer calls the process group from C++); the groups' sequence
    numbers do."""
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, "-c", DDP, str(r), port], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for r in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-2000:]
        counted, wrapper = int(out.split()[1]), int(out.split()[3])
        # one bucket's all-reduce a backward (and the first backward's bucket rebuild)
        assert counted >= 3 and wrapper == 0, out


def test_the_writer_reports_the_observed_position_and_mean_share():
    from meshrun.worker import progress as mod

    writer = object.__new__(mod._Writer)
    writer.steps, writer.gpu_busy, writer.shares, writer.cuda = [], [], [], None
    writer.step = writer.coll = writer.active = -1
    assert not writer._due(None, 0.0, False)          # nothing observed, nothing reported
    writer.observe(10, -1.0, 0)
    writer.observe(12, 0.4, 0)
    writer.observe(14, 0.6, 1)
    assert writer._due(None, 0.0, False)
    report = writer._report()
    assert (report.step, report.coll, report.steps, report.active) == (-1, 14, 0, 1)
    assert report.work == pytest.approx(0.5)
    assert protocol.Progress.decode(report.encode()) == report
    assert not writer._due(report.moved, 10**9, False)   # no move, no timings waiting
    writer.observe(14, 0.9, 2)                        # a second of work, no collective
    assert writer._due(report.moved, 10**9, False)


def _work(rank_shares: dict[int, float], coll: int) -> dict[int, str]:
    return {r: protocol.Progress(-1, 0.0, coll=coll, work=share).encode()
            for r, share in rank_shares.items()}


def test_a_node_whose_ranks_work_while_the_others_wait_is_named_by_its_work_share():
    slow = Stragglers(2, 2, {0: "a", 1: "b"}, window=10.0)
    notices = []
    for beat in range(40):                       # one report a rank a second, collectives move
        notices += slow.observe(float(beat),
                                _work({0: 0.45, 1: 0.44, 2: 0.92, 3: 0.9}, 10 * (beat + 1)))
    assert [n.kind for n in notices] == ["slow"] and notices[0].node == 1
    assert notices[0].measure == WORK
    assert notices[0].line.startswith("meshrun: node 1 (b) is slow: 2.")
    assert "time working (not waiting for the others) of the other nodes" in notices[0].line
    assert slow.summary()["nodes"][1]["work_share"] == pytest.approx(0.91)


def test_like_work_shares_name_nobody():
    slow = Stragglers(2, 1, {}, window=5.0)
    notices = []
    for beat in range(30):
        notices += slow.observe(float(beat), _work({0: 0.5 + 0.05 * (beat % 2), 1: 0.52},
                                                   5 * (beat + 1)))
    assert notices == []


def test_a_hang_check_counts_a_moved_position_not_a_new_report():
    from meshrun.runtime.judges import position as _position

    waiting = protocol.Progress(-1, 1.0, coll=7, work=0.0).encode()
    later = protocol.Progress(-1, 6.0, coll=7, work=0.0).encode()   # refreshed, not moved
    moved = protocol.Progress(-1, 7.0, coll=8, work=0.3).encode()
    assert _position(waiting) == _position(later) != _position(moved)
    assert _position("garbage") == (-1, -1)
    busy = protocol.Progress(-1, 8.0, coll=7, work=0.9, active=3).encode()
    assert _position(busy) == _position(waiting)              # not further along ...
    assert _position(busy, moved=True) != _position(waiting, moved=True)  # ... but moving


def test_a_report_between_two_samples_keeps_the_ranks_measure():
    """A script reporting steps faster than the observer samples sends reports without a
    work share; they must not switch the rank to another measure (compute time), which the
    other nodes' shares cannot be compared with."""
    slow = Stragglers(2, 1, {0: "a", 1: "b"}, window=6.0)
    notices = []
    for beat in range(30):
        values = {}
        for rank, share in ((0, 0.5), (1, 0.5)):
            work = share if beat % 2 == 0 else -1.0            # every other report: none
            busy = 0.01 if rank == 1 else 0.2                    # rank 0 'computes' 20x longer
            values[rank] = protocol.Progress(beat * 10 + 10, 0.0, 0.3, busy, 10,
                                             coll=beat * 20, work=work).encode()
        notices += slow.observe(float(beat), values)
    assert notices == []
    assert {s.measure for s in slow._ranks.values()} == {WORK}


def test_gpu_workers_get_nccls_collective_timing_when_asked_unless_the_user_chose():
    """NCCL's completion hooks carry timings only with TORCH_NCCL_ENABLE_TIMING=1 (torch
    refuses the hook without it): with MESHRUN_OBSERVE=timing the plan sets it for GPU
    workers, with its reason, and leaves a user's value alone."""
    from unit_fakes import CPU_HOST, GPU8_HOST, plan

    def timing(env, facts=GPU8_HOST):
        return {v.name: v for v in plan(env, facts=facts).env}.get("TORCH_NCCL_ENABLE_TIMING")

    on = timing({"MESHRUN_OBSERVE": "timing"})
    assert on is not None and on.value == "1" and "observer" in on.reason
    assert timing({}) is None                             # by default: no timing events
    assert timing({"MESHRUN_OBSERVE": "timing", "TORCH_NCCL_ENABLE_TIMING": "0"}) is None
    assert timing({"MESHRUN_OBSERVE": "0"}) is None
    assert timing({"MESHRUN_OBSERVE": "timing"}, facts=CPU_HOST) is None


@pytest.mark.parametrize("positions,reasons,silent,expected", [
    ({0: (-1, 12), 1: (-1, 10)}, {0: "not in a collective"}, (), [1]),   # behind: named
    ({0: (-1, 12), 1: (-1, 12)}, {0: "not in a collective", 1: "stopped"}, (), [1]),
    ({0: (-1, 12), 1: (-1, 12)}, {0: "not in a collective", 1: "no stack dump"}, (), [1]),
    ({0: (-1, 12), 1: (-1, 12)}, {0: "not in a collective"}, (), [0]),
    ({0: (5, 40), 1: (5, 40)}, {}, (1,), [1]),                               # never reported
    # a stopped process is named even where a report sampled earlier makes others "behind"
    ({0: (-1, 14), 1: (-1, 12), 2: (-1, 12), 3: (-1, 12)}, {3: "stopped"}, (), [3]),
])
def test_a_hang_names_the_rank_behind_else_the_strongest_probe_reason(positions, reasons,
                                                                      silent, expected):
    """A SIGSTOPped rank of a DDP script and its peer, blocked in the backward's all-reduce
    (no collective in its Python stack), are level: only the stopped one is named."""
    from meshrun.runtime.events import hang_suspects

    assert hang_suspects(positions, reasons, silent) == expected


def test_stop_ends_the_sampling_before_the_shim_destroys_the_group():
    """The worker shim stops the observer before it destroys the script's process group:
    stop() waits for a sample under way and the thread ends (it holds no group after)."""
    code = textwrap.dedent("""
        import sys, time, types
        from meshrun.worker import observe
        observe.PERIOD_S = 0.01
        seen = []
        dist = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                                     distributed_c10d=types.SimpleNamespace(
                                         _world=types.SimpleNamespace(pg_map={})),
                                     get_backend=lambda pg: "gloo")
        sys.modules["torch.distributed"] = dist
        thread = observe.start(lambda *a: seen.append(a))
        time.sleep(0.3)
        observe.stop()
        thread.join(2.0)
        print(len(seen) > 0, thread.is_alive())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.split() == ["True", "False"], out.stdout + out.stderr

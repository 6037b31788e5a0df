"""meshrun.destroy_process_group: every rank tears gloo down with the others, and a rank that
never comes holds nobody longer than the timeout (two real gloo ranks, tcp:// store)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from helpers import free_port

RANK = textwrap.dedent("""
    import sys, time
    from datetime import timedelta
    import torch, torch.distributed as dist
    import meshrun
    rank, port, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=timedelta(seconds=30))
    t = torch.ones(1)
    dist.all_reduce(t)
    if mode == "vanish" and rank == 1:
        print("gone", flush=True)
        time.sleep(30)          # never leaves: alive, out of every collective, silent
    began = time.monotonic()
    together = meshrun.destroy_process_group(timeout=3.0)
    print(f"left together={together} after={time.monotonic() - began:.2f} "
          f"initialized={dist.is_initialized()} sum={t.item()}", flush=True)
""")


def _ranks(mode: str) -> list[subprocess.Popen]:
    port = str(free_port())
    return [subprocess.Popen([sys.executable, "-c", RANK, str(r), port, mode],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for r in (0, 1)]


def test_every_rank_leaves_together_and_exits_cleanly():
    procs = _ranks("together")
    outs = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-2000:]
        assert "left together=True" in out and "initialized=False sum=2.0" in out, out
        assert "terminate called" not in err


def test_a_rank_that_never_leaves_holds_the_other_only_until_the_timeout():
    procs = _ranks("vanish")
    try:
        out, err = procs[0].communicate(timeout=120)
        assert procs[0].returncode == 0, err[-2000:]
        assert "left together=False" in out and "initialized=False" in out, out
        waited = float(out.split("after=")[1].split()[0])
        assert 2.9 <= waited < 10, waited       # its 3 s bound, not the group's 30 s
    finally:
        procs[1].kill()
        procs[1].wait()


def test_one_process_or_no_group_is_a_plain_destroy():
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import meshrun, torch.distributed as dist
        print(meshrun.destroy_process_group())          # no group: nothing to do
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=0,
                                world_size=1)
        print(meshrun.destroy_process_group(), dist.is_initialized())
    """ % free_port())], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True", "False"], done.stdout

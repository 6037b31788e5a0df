"""Collective bandwidth across the job: all-reduce and all-gather, as nccl-tests measure them.

Run by every worker of ``meshrun bench`` (or ``meshrun simulate --bench``)::

    python -m meshrun.worker.collbench [--sizes 1K:1G] [--iters 20] [--warmup 5]

For each message size S (bytes, doubling from the first to the last of
``--sizes``) and each collective, after ``--warmup`` untimed runs, ``--iters``
runs are timed between barriers; the time is the slowest rank's mean. As in
nccl-tests (``doc/PERFORMANCE.md``):

- algbw = S / time;
- all-reduce: S is the buffer each rank holds; busbw = algbw x 2(n-1)/n;
- all-gather: S is the *gathered* buffer (each rank gives S/n); busbw = algbw x (n-1)/n.

busbw is what compares to the hardware's link bandwidth, whatever n is. Rank 0
prints a table and writes ``bench.json`` into the run's log folder
(``MESHRUN_LOG_DIR``). On GPUs NCCL's own log (``NCCL_DEBUG=INFO``, to a file)
tells which transport carried the traffic; the result says so and flags the
case where InfiniBand exists on the host but sockets were used.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
import time

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "G": 1 << 30, "GB": 1 << 30}


def parse_size(text: str) -> int:
    """``1K`` -> 1024, ``1G`` -> 2**30, ``4096`` -> 4096."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?B?)\s*", text.upper())
    if not m or int(m.group(1)) <= 0:
        raise ValueError(f"not a size: {text!r} (examples: 4096, 64K, 1M, 1G)")
    return int(m.group(1)) * _UNITS[m.group(2)]


def sizes_between(spec: str) -> list[int]:
    """``1K:1G`` -> 1K, 2K, 4K, ..., 1G (doubling); a single size gives one."""
    first, _, last = spec.partition(":")
    lo, hi = parse_size(first), parse_size(last or first)
    if hi < lo:
        raise ValueError(f"sizes {spec!r}: the last is smaller than the first")
    out, size = [], lo
    while size <= hi:
        out.append(size)
        size *= 2
    return out


def bus_factor(collective: str, n: int) -> float:
    if n <= 1:
        return 0.0  # nccl-tests: nothing crosses a bus with one rank
    return 2 * (n - 1) / n if collective == "all_reduce" else (n - 1) / n


def transport_from_nccl_log(text: str) -> str:
    """``IB`` / ``Socket`` / ``P2P/SHM only`` (one node) / ``unknown`` from NCCL INFO lines such
    as ``NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0`` or ``Using network IB``."""
    nets = set(re.findall(r"via NET/(IB|Socket)", text))
    nets |= set(re.findall(r"Using network (IB|Socket)", text))
    if "IB" in nets:
        return "IB"
    if "Socket" in nets:
        return "Socket"
    if re.search(r"via (P2P|SHM)", text):
        return "P2P/SHM only"
    return "unknown"


def human(size: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="meshrun.worker.collbench")
    parser.add_argument("--sizes", default="1K:1G")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    sizes = sizes_between(args.sizes)

    import torch
    import torch.distributed as dist

    backend = os.environ.get("MESHRUN_BACKEND") or ("nccl" if torch.cuda.is_available()
                                                     else "gloo")
    if backend == "nccl":   # every tensor a collective gets must be on this GPU
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        dist.init_process_group(backend, device_id=device)   # barrier() on this GPU too
    else:
        device = torch.device("cpu")
        dist.init_process_group(backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    results = []
    for size in sizes:
        for collective in ("all_reduce", "all_gather"):
            op, nbytes = collective_op(dist, collective, size, n, device)
            for _ in range(args.warmup):
                op()
            _sync(torch, device)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(args.iters):
                op()
            _sync(torch, device)
            seconds = float(slowest(dist, (time.perf_counter() - start) / args.iters,
                                    device).item())
            algbw = nbytes / seconds / 1e9
            results.append({"collective": collective, "size_bytes": nbytes,
                            "time_us": seconds * 1e6, "algbw_GBps": algbw,
                            "busbw_GBps": algbw * bus_factor(collective, n)})
            del op
    if rank == 0:
        report = {"world_size": n, "backend": backend, "iters": args.iters,
                  "nnodes": int(os.environ.get("MESHRUN_NNODES", "1")), "results": results}
        if backend == "nccl":
            report["transport"] = nccl_transport()
            report["infiniband_present"] = bool(glob.glob(os.path.join(
                os.environ.get("MESHRUN_SYSFS_ROOT", "/sys"), "class", "infiniband", "*")))
            report["ib_unused"] = report["infiniband_present"] and report["transport"] == "Socket"
        _print_table(report)
        folder = os.environ.get("MESHRUN_LOG_DIR") or "."
        with open(os.path.join(folder, "bench.json"), "w") as handle:
            json.dump(report, handle, indent=2)
        print(f"bench: results in {os.path.join(folder, 'bench.json')}", flush=True)
    dist.destroy_process_group()
    return 0


def collective_op(dist, collective: str, size: int, n: int, device):
    """``(op, bytes)``: one run of ``collective`` over a buffer of ``size`` bytes made on
    ``device`` (NCCL takes only tensors on the GPU), and the bytes nccl-tests counts."""
    import torch

    elems = max(1, size // 4)
    if collective == "all_reduce":
        buf = torch.ones(elems, dtype=torch.float32, device=device)
        return (lambda: dist.all_reduce(buf)), elems * 4
    part = max(1, elems // n)
    out = torch.empty(part * n, dtype=torch.float32, device=device)
    inp = torch.ones(part, dtype=torch.float32, device=device)
    # torch 2.13 renamed it (the old name warns on every rank); 2.11 has only that
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return (lambda: gather(out, inp)), part * n * 4


def slowest(dist, seconds: float, device):
    """The slowest rank's ``seconds``: a one-element tensor all-reduced with MAX. It is made on
    ``device``: NCCL has no CPU path (a CPU tensor on an NCCL group fails with "No backend type
    associated with device type cpu")."""
    import torch

    took = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(took, op=dist.ReduceOp.MAX)
    return took


def _sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def nccl_transport(host: str | None = None) -> str:
    """The transport NCCL's INFO log files (``NCCL_DEBUG_FILE``) show: every host's, or
    only ``host``'s (``%h`` in the pattern is the host name; a shared log folder holds
    every node's files)."""
    pattern = os.environ.get("NCCL_DEBUG_FILE", "")
    if host is not None:
        pattern = pattern.replace("%h", host)
    text = ""
    for path in glob.glob(re.sub(r"%[hp]", "*", pattern)) if pattern else []:
        try:
            with open(path, errors="replace") as handle:
                text += handle.read()
        except OSError:
            continue
    return transport_from_nccl_log(text)


def _print_table(report: dict) -> None:
    print(f"bench: {report['world_size']} ranks on {report['nnodes']} node(s), "
          f"{report['backend']}, {report['iters']} timed iterations per size", flush=True)
    print(f"{'size':>8} {'collective':>11} {'time (us)':>12} {'algbw GB/s':>11} "
          f"{'busbw GB/s':>11}")
    for row in report["results"]:
        print(f"{human(row['size_bytes']):>8} {row['collective']:>11} {row['time_us']:>12.1f} "
              f"{row['algbw_GBps']:>11.3f} {row['busbw_GBps']:>11.3f}")
    if "transport" in report:
        print(f"bench: NCCL transport: {report['transport']}")
        if report.get("ib_unused"):
            print("bench: WARNING: InfiniBand devices exist on this host but NCCL used sockets; "
                  "check NCCL_IB_DISABLE, NCCL_IB_HCA and `meshrun doctor`")
    sys.stdout.flush()


if __name__ == "__main__":
    raise SystemExit(main())

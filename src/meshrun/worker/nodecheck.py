"""The node check: before training, name the node whose compute or whose link is slow.

Run by every worker of ``meshrun doctor --all-nodes`` (as ``python -m
meshrun.worker.nodecheck``) and, with ``meshrun run --node-check``, by every worker before
the script starts (:func:`before_script`; its first attempt only). In a fixed budget (about
3 s of measurement on CPU, 2 s on GPUs):

1. **compute**: every rank runs square matmuls sized to its device (fp32 384 x 384 on CPU,
   bf16 8192 x 8192 on a GPU) for ``_COMPUTE_S`` and measures its GFLOP/s, all ranks at once
   (as in training: a node whose processes share too few cores shows it);
2. **all-reduce**: every rank takes part in a few ring all-reduces (4 MiB on CPU, 256 MiB on
   GPUs): the job's bus bandwidth (nccl-tests' busbw);
3. **pairwise transfers**: one rank per node (local rank 0) sends a buffer to the next node
   in a ring and receives one from the previous; the time of each receive is the bandwidth of
   that link.

A node is **slow** when its compute time per matmul (its ranks' median) is at least
``FACTOR`` (1.3) times the median of the other nodes', or when even the faster of its two
ring links is that much slower than the other nodes' median (three nodes or more: with two,
both transfers cross the same pair of hosts and a slow link cannot be told from a slow
peer, so the links are given, not judged). On GPUs each node reads its NCCL log
(``NCCL_DEBUG=INFO`` to a file, set by meshrun) and a node whose NCCL went over sockets
while the others used InfiniBand is named too.

The check uses a process group of its own (a ``PrefixStore`` on the workers' store, no
default group), so the script's own ``init_process_group`` is untouched. Every node's local
rank 0 prints the verdict, one line per finding and a summary, and writes
``nodecheck.node<k>.json`` in the run's log folder (``meshrun doctor`` reads it).
:func:`judge` is pure (unit-tested without torch).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import time
from datetime import timedelta
from typing import Any

from .. import protocol
from .collbench import nccl_transport
from .dist import RankEnv, read_env

FACTOR = 1.3
_COMPUTE_S = 1.0     # the compute test, in ``_SLICES`` slices
_SLICES = 5
_TIMEOUT_S = 30.0     # every operation of the check, and its process group
_TRANSPORTS = ("unknown", "P2P/SHM only", "Socket", "IB")


def _others_median(values: dict[int, float], node: int) -> float | None:
    others = [v for n, v in values.items() if n != node and v > 0]
    return statistics.median(others) if others else None


def _below(values: dict[int, float], factor: float) -> list[tuple[int, float, float]]:
    """(node, ratio, reference) of each node whose figure (higher is faster) is ``factor``
    times or more below the median of the other nodes'."""
    out = []
    for n in sorted(values):
        ref = _others_median(values, n)
        if ref and values[n] > 0 and ref / values[n] >= factor:
            out.append((n, ref / values[n], ref))
    return out


def judge(rows: list[dict[str, Any]], hosts: dict[int, str], *, seconds: float,
          busbw: float, factor: float = FACTOR) -> dict[str, Any]:
    """The verdict from every rank's row: ``{"rank", "node", "gflops", "link_in"}`` (GB/s
    received from the previous node, local rank 0 only, else -1) and ``"transport"``."""
    nodes = sorted({r["node"] for r in rows})
    compute = {n: statistics.median(r["gflops"] for r in rows if r["node"] == n) for n in nodes}
    link_in = {r["node"]: r["link_in"] for r in rows if r.get("link_in", -1) >= 0}
    ring = sorted(link_in)
    link_out = {n: link_in[ring[(i + 1) % len(ring)]] for i, n in enumerate(ring)} \
        if len(ring) > 1 else {}
    transport = {r["node"]: r.get("transport", "unknown") for r in rows
                 if r.get("link_in", -1) >= 0}
    findings: list[dict[str, Any]] = [
        {"node": n, "what": "compute", "ratio": ratio,
         "line": f"meshrun: node check: node {n} ({hosts.get(n, '?')}) is slow: its compute "
                 f"runs at {compute[n]:.3g} GFLOP/s a rank, {ratio:.1f}x slower than the "
                 f"other nodes' median ({ref:.3g} GFLOP/s)"}
        for n, ratio, ref in _below(compute, factor)]
    best = {n: max(link_in[n], link_out[n]) for n in ring} if len(ring) >= 3 else {}
    findings += [
        {"node": n, "what": "link", "ratio": ratio,
         "line": f"meshrun: node check: node {n} ({hosts.get(n, '?')}) has a slow link: "
                 f"{best[n]:.3g} GB/s at best to its ring neighbours, {ratio:.1f}x below the "
                 f"other nodes' median ({ref:.3g} GB/s)"}
        for n, ratio, ref in _below(best, factor)]
    known = [t for t in transport.values() if t in ("IB", "Socket")]
    if "IB" in known:
        for n, t in sorted(transport.items()):
            if t == "Socket":
                findings.append({"node": n, "what": "transport", "ratio": None,
                                 "line": f"meshrun: node check: node {n} ({hosts.get(n, '?')}) "
                                         "sent NCCL's traffic over sockets while other nodes "
                                         "used InfiniBand"})
    slow = sorted({f["node"] for f in findings})
    links = [v for v in link_in.values() if v > 0]
    summary = (f"meshrun: node check: {len(nodes)} nodes in {seconds:.1f} s: compute "
               f"{min(compute.values()):.3g}-{max(compute.values()):.3g} GFLOP/s a rank, "
               f"all-reduce {busbw:.3g} GB/s bus"
               + (f", node links {min(links):.3g}-{max(links):.3g} GB/s" if links else "")
               + ("; no slow node" if not slow else
                  "; slow: " + ", ".join(f"node {n} ({hosts.get(n, '?')})" for n in slow)))
    return {"factor": factor, "seconds": round(seconds, 2), "allreduce_busbw_GBps": busbw,
            "nodes": [{"node": n, "host": hosts.get(n, "?"), "gflops_per_rank": compute[n],
                       "link_in_GBps": link_in.get(n), "link_out_GBps": link_out.get(n),
                       "transport": transport.get(n, "unknown")} for n in nodes],
            "findings": findings, "summary": summary}


# --- the measurement (in workers; torch only here) -----------------------------------------

def _group(torch_dist, rank: int, world: int, device_type: str):
    """A process group of the check's own on the workers' store."""
    store = torch_dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                world, is_master=False, timeout=timedelta(seconds=_TIMEOUT_S),
                                wait_for_workers=False)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    prefixed = torch_dist.PrefixStore(protocol.nodecheck_prefix(attempt), store)
    if device_type == "cuda":
        opts = torch_dist.ProcessGroupNCCL.Options()
        opts._timeout = timedelta(seconds=_TIMEOUT_S)
        return prefixed, torch_dist.ProcessGroupNCCL(prefixed, rank, world, opts)
    # this constructor picks the interface as init_process_group does (GLOO_SOCKET_IFNAME)
    return prefixed, torch_dist.ProcessGroupGloo(prefixed, rank, world,
                                                 timedelta(seconds=_TIMEOUT_S))


def wait(work) -> None:
    """Every operation of the check waits at most ``_TIMEOUT_S`` (a rank that failed its
    part does not hold the others past it)."""
    work.wait(timedelta(seconds=_TIMEOUT_S))


def _phases(nnodes: int) -> int:
    """The ring's edges (node i -> i + 1) in phases where no node both sends and receives:
    two for an even count, three for an odd one (the closing edge alone). On NCCL a send
    and a receive between the same pair on one stream would wait for each other."""
    return 2 if nnodes % 2 == 0 else 3


def _phase_of(sender: int, nnodes: int) -> int:
    if nnodes % 2 and sender == nnodes - 1:
        return 2
    return sender % 2


def _compute_gflops(torch, device) -> float:
    """The median rate of ``_SLICES`` slices of ``_COMPUTE_S`` in all (a one-off stall of
    the host does not make a node slow; a quota or a slow clock slows every slice). On CPU
    with one thread: per-core speed, the same on every node whatever else shares its cores
    for a moment; a CPU quota still shows."""
    n, dtype = (8192, torch.bfloat16) if device.type == "cuda" else (384, torch.float32)
    threads = torch.get_num_threads()
    if device.type != "cuda":
        torch.set_num_threads(1)
    try:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        for _ in range(3):
            a @ b
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        sync()
        rates = []
        for _ in range(_SLICES):
            count, started = 0, time.perf_counter()
            while time.perf_counter() - started < _COMPUTE_S / _SLICES:
                for _ in range(10 if device.type == "cuda" else 1):
                    a @ b
                    count += 1
                sync()
            rates.append(2 * n ** 3 * count / (time.perf_counter() - started) / 1e9)
        return statistics.median(rates)
    finally:
        torch.set_num_threads(threads)


def measure(where: RankEnv) -> dict[str, Any]:
    """Run the check in this worker; every rank returns the verdict."""
    import torch
    import torch.distributed as torch_dist

    rank, world, local, nproc = (where.rank, where.world_size, where.local_rank,
                                 where.local_world_size)
    node, nnodes = where.node_rank, where.nnodes
    cuda = torch.cuda.is_available() and where.backend != "gloo"
    if cuda:
        torch.cuda.set_device(local)
    device = torch.device("cuda" if cuda else "cpu")
    started = time.monotonic()
    store, pg = _group(torch_dist, rank, world, device.type)
    if local == 0:
        store.set(protocol.nodecheck_host_key(node), socket.gethostname())
    wait(pg.barrier())
    gflops = _compute_gflops(torch, device)

    size = (256 << 20) if cuda else (4 << 20)
    buf = torch.ones(size // 4, device=device)
    wait(pg.allreduce([buf]))  # warm-up: connections made
    wait(pg.barrier())
    t0, iters = time.perf_counter(), 5
    for _ in range(iters):
        wait(pg.allreduce([buf]))
    if cuda:
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - t0) / iters
    busbw = size / seconds / 1e9 * (2 * (world - 1) / world if world > 1 else 0.0)

    link_in = -1.0
    if nnodes > 1:  # node ring over local ranks 0 (every rank takes part in the barriers)
        took = []
        out, got = torch.ones(size // 4, device=device), torch.empty(size // 4, device=device)
        for phase in range(_phases(nnodes)):
            for i in range(4):  # the first is a warm-up
                wait(pg.barrier())  # sender and receiver start together
                if local == 0 and _phase_of(node, nnodes) == phase:  # my edge node -> next
                    wait(pg.send([out], ((node + 1) % nnodes) * nproc, i))
                if local == 0 and _phase_of((node - 1) % nnodes, nnodes) == phase:
                    t = time.perf_counter()
                    wait(pg.recv([got], ((node - 1) % nnodes) * nproc, i))
                    if cuda:
                        torch.cuda.synchronize()
                    if i:
                        took.append(time.perf_counter() - t)
        if took:
            link_in = size / statistics.median(took) / 1e9
    transport = nccl_transport(socket.gethostname()) if cuda and local == 0 else "unknown"
    row = torch.tensor([float(rank), float(node), gflops, link_in,
                        float(_TRANSPORTS.index(transport) if transport in _TRANSPORTS else 0)],
                       dtype=torch.float64, device=device)
    rows = [torch.empty_like(row) for _ in range(world)]
    wait(pg.allgather([rows], [row]))
    hosts = {}
    if local == 0:
        names = store.multi_get([protocol.nodecheck_host_key(n) for n in range(nnodes)])
        hosts = {n: bytes(v).decode(errors="replace") for n, v in enumerate(names)}
    table = [{"rank": int(r[0]), "node": int(r[1]), "gflops": float(r[2]),
              "link_in": float(r[3]), "transport": _TRANSPORTS[int(r[4])]}
             for r in (t.cpu().tolist() for t in rows)]
    wait(pg.barrier())  # nobody leaves (closing its connections) while another still reads
    shutdown = getattr(pg, "shutdown", None)
    if shutdown is not None:
        shutdown()
    del pg
    if cuda:
        torch.cuda.empty_cache()
    return judge(table, hosts, seconds=time.monotonic() - started, busbw=busbw)


def report(verdict: dict[str, Any], where: RankEnv) -> None:
    """Local rank 0 of every node: the lines, and ``nodecheck.node<k>.json``."""
    if where.local_rank != 0:
        return
    for finding in verdict["findings"]:
        print(finding["line"], flush=True)
    print(verdict["summary"], flush=True)
    folder = os.environ.get("MESHRUN_LOG_DIR") or "."
    try:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"nodecheck.node{where.node_rank}.json"),
                  "w") as handle:
            json.dump(verdict, handle, indent=2)
    except OSError:
        pass  # the lines are the verdict; the file is a copy


def before_script() -> None:
    """``meshrun run --node-check``: the check before the script, on the first attempt only
    (a restart does not repeat it). A slow node is named; the script runs all the same."""
    if os.environ.get("MESHRUN_NODE_CHECK") != "1" or \
            os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return
    try:
        where = read_env(os.environ)
        report(measure(where), where)
    except Exception as exc:  # noqa: BLE001 - a check must not stop the job it checks
        print(f"meshrun: node check: could not run ({type(exc).__name__}: {exc}); the job "
              "goes on", file=sys.stderr, flush=True)


def main() -> int:
    where = read_env(os.environ)
    report(measure(where), where)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The planner: topology + host facts + flags -> :class:`LaunchPlan`. Pure.

``make_plan(env, flags, facts, command)`` reads nothing but its arguments, so a
64-node plan is a unit test. Every malformed or inconsistent input raises a
:class:`~meshrun.errors.UsageError` whose one line names the variable or flag
and the fix; ``meshrun plan`` and ``meshrun run`` share this function, so they
validate exactly alike.

The WORLD_SIZE rule
-------------------
``WORLD_SIZE`` counts nodes on PAI-DLC, KubeBrain, Volcano and older Kubeflow
PyTorchJobs, but processes in torch and newer PyTorchJobs. meshrun reads it so:

1. ``--world-size-means nodes|processes`` (``MESHRUN_WORLD_SIZE_MEANS``) decides;
2. else, when another source gives the node count (``--nnodes``, ``PET_NNODES``,
   ``NNODES``, ``SLURM_NNODES``, ...): ``WORLD_SIZE == nodes`` reads as nodes,
   ``WORLD_SIZE == nodes x processes per node`` as processes, anything else is a
   contradiction;
3. else it is the node count: the platforms that export WORLD_SIZE without any
   other node count (PAI-DLC, KubeBrain, Volcano's plugin, older PyTorchJob)
   all mean nodes.

``RANK`` from the same platforms is always the node (pod) index.

The master address is stored bare (``fd00::1``, also when written ``[fd00::1]``): that is
what getaddrinfo and torch's TCPStore take. Text that prints it with its port brackets an
IPv6 host (``[fd00::1]:29500``) through :func:`meshrun.topology.address.join_host_port`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from ..errors import UsageError
from ..facts.host import Gpu, HostFacts
from ..topology import Flags, Sourced, Topology, detect
from ..topology.address import HAS_PORT, host_problem, unbracket
from .model import (
    DEFAULT_JOIN_TIMEOUT,
    DEFAULT_LOG_DIR,
    DEFAULT_MASTER_PORT,
    RUN_ID,
    Command,
    EnvVar,
    JobInput,
    LaunchPlan,
)


def make_plan(env: Mapping[str, str], flags: Flags, facts: HostFacts,
              command: Command | None = None, job: JobInput | None = None, *,
              simulated_workers: int = 0) -> LaunchPlan:
    """Resolve and validate everything; raise :class:`UsageError` on any bad input.

    ``simulated_workers``: this node is one of ``meshrun simulate``'s, and that many workers
    (all simulated nodes') share this host's CPUs."""
    topo = detect(env, flags, facts.host_info())
    source: dict[str, str] = {}
    warnings: list[str] = []

    visible, gpus = _visible_gpus(env, facts)
    nproc = _nproc(topo, visible, facts, source, warnings)
    gpu_mode = bool(visible)
    if gpu_mode:
        visible, gpus = visible[:nproc], gpus[:nproc]

    nnodes, reading = _nnodes(topo, nproc, source)
    node_rank = _node_rank(topo, nnodes, source)
    spares = _spares(topo, nnodes, source)
    seated = nnodes - spares  # the nodes that train; the others wait as spares
    min_nodes = _min_nodes(topo, nnodes, seated, source)
    _one_agent_per_node(topo, nproc)
    master_addr = _master_addr(topo, nnodes, source, facts)
    master_port = _master_port(topo, nnodes, source)
    run_id = _run_id(topo, master_addr, master_port, nnodes, command, source)
    log_root = topo.log_dir.value if topo.log_dir else DEFAULT_LOG_DIR
    source["log_dir"] = topo.log_dir.source if topo.log_dir else "default"
    join_timeout = topo.join_timeout.value if topo.join_timeout else DEFAULT_JOIN_TIMEOUT
    backend = "nccl" if gpu_mode else "gloo"
    source["backend"] = ("GPUs visible: NCCL" if gpu_mode
                         else "no GPU visible: CPU workers with gloo")
    log_dir = f"{log_root.rstrip('/')}/{run_id}"

    worker_env = _worker_env(env, visible, gpu_mode, nproc, seated, node_rank, run_id, backend,
                             log_dir, threads_for(env, nproc, facts.cpus, simulated_workers,
                                                  nnodes))
    if facts.gpu_error:
        warnings.append(f"{facts.gpu_error}; running on CPU")
    notes = list(topo.notes)
    if facts.net is not None:
        from ..nccl.policy import network_env

        policy = network_env(facts.net, nnodes=nnodes, device="cuda" if gpu_mode else "cpu",
                             user_env=env, simulated=simulated_workers > 0)
        worker_env += list(policy.env)
        warnings += list(policy.warnings)
        notes += list(policy.notes)
    config = None
    if job is not None:
        from ..job.config import resolve

        config = resolve(recipe_defaults=job.recipe_defaults, file_data=job.file_data,
                         sets=job.sets, world_size=seated * nproc, nproc_per_node=nproc,
                         nnodes=seated, run_id=run_id, config_path=job.config_path,
                         flags=job.flags)
        if min_nodes is not None:
            from ..job.config import elastic

            config = elastic(config, min_nodes)
        worker_env += [EnvVar(name, value, "the resolved job config, for recipes and "
                              "meshrun.job.from_env") for name, value in config.to_env().items()]
        warnings += list(config.warnings)
    return LaunchPlan(
        nnodes=nnodes, node_rank=node_rank, nproc_per_node=nproc, world_size=seated * nproc,
        global_ranks=tuple(range(node_rank * nproc, (node_rank + 1) * nproc))
        if node_rank < seated else (),
        master_addr=master_addr, master_port=master_port, run_id=run_id, backend=backend,
        device="cuda" if gpu_mode else "cpu", visible_devices=tuple(visible),
        gpu_names=tuple(g.name for g in gpus), log_dir=log_dir, join_timeout=join_timeout,
        env=tuple(worker_env), source=source, platform=topo.platform, platforms=topo.platforms,
        world_size_reading=reading, hostname=facts.hostname, command=command,
        warnings=tuple(warnings), notes=tuple(notes), job=config,
        simulated_workers=simulated_workers, spares=spares, min_nodes=min_nodes)


# --- devices -----------------------------------------------------------------------------

def _visible_gpus(env: Mapping[str, str], facts: HostFacts) -> tuple[list[str], list[Gpu]]:
    """The GPUs this node may use, as CUDA_VISIBLE_DEVICES tokens, honouring that variable."""
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return [str(g.index) for g in facts.gpus], list(facts.gpus)
    tokens = [t.strip() for t in raw.split(",")]
    if raw.strip() in ("", "-1", "NoDevFiles") or tokens == [""]:
        return [], []
    by_index = {g.index: g for g in facts.gpus}
    seen: set[str] = set()
    chosen: list[Gpu] = []
    for token in tokens:
        gpu = _resolve_gpu(token, raw, by_index, facts)
        key = gpu.uuid or token
        if key in seen:
            raise UsageError(f"CUDA_VISIBLE_DEVICES={raw} names GPU {token} twice",
                             subject="CUDA_VISIBLE_DEVICES",
                             hint="list each GPU once, e.g. CUDA_VISIBLE_DEVICES=0,1",
                             code="bad-cuda-visible-devices")
        seen.add(key)
        chosen.append(gpu)
    return tokens, chosen


def _resolve_gpu(token: str, raw: str, by_index: dict[int, Gpu], facts: HostFacts) -> Gpu:
    have = ", ".join(str(i) for i in sorted(by_index)) or "none"
    if token.isdigit():
        if int(token) in by_index:
            return by_index[int(token)]
        raise UsageError(f"CUDA_VISIBLE_DEVICES={raw} names GPU {token}, but this host has GPUs: "
                         f"{have}", subject="CUDA_VISIBLE_DEVICES",
                         hint="list only GPUs of this host (nvidia-smi -L), or unset it",
                         code="bad-cuda-visible-devices")
    if token.startswith("MIG-"):
        return Gpu(index=-1, uuid=token, name="MIG device")
    if token.startswith("GPU-"):
        matches = [g for g in facts.gpus if g.uuid.startswith(token)]
        if len(matches) == 1:
            return matches[0]
        why = "matches no GPU of this host" if not matches else "matches several GPUs"
        raise UsageError(f"CUDA_VISIBLE_DEVICES={raw}: {token} {why}",
                         subject="CUDA_VISIBLE_DEVICES",
                         hint="use indices or full UUIDs from nvidia-smi -L, or unset it",
                         code="bad-cuda-visible-devices")
    raise UsageError(f"CUDA_VISIBLE_DEVICES={raw}: {token!r} is neither a GPU index nor a UUID",
                     subject="CUDA_VISIBLE_DEVICES",
                     hint="use indices like 0,1 or UUIDs like GPU-8f2e..., or unset it",
                     code="bad-cuda-visible-devices")


def _nproc(topo: Topology, visible: list[str], facts: HostFacts, source: dict[str, str],
           warnings: list[str]) -> int:
    chosen = topo.nproc_per_node
    if chosen is None:
        if visible:
            source["nproc_per_node"] = f"one per visible GPU ({len(visible)})"
            return len(visible)
        source["nproc_per_node"] = "no GPU visible: one CPU process per node"
        return 1
    source["nproc_per_node"] = chosen.source
    if visible and chosen.value > len(visible):
        raise UsageError(
            f"{_say(chosen)} asks for {chosen.value} processes but this node has "
            f"{len(visible)} visible GPUs ({', '.join(visible)}): worker {len(visible)} would "
            "fail with 'invalid device ordinal'", subject=chosen.source,
            hint=f"use {len(visible)} processes per node (a node runs only on its own GPUs; "
                 "more GPUs means more nodes)", code="too-many-processes")
    if not visible and not chosen.explicit:
        why = facts.gpu_error or "nvidia-smi lists no GPU"
        raise UsageError(f"{_say(chosen)} promises {chosen.value} GPUs but none is visible here "
                         f"({why})", subject=chosen.source,
                         hint="check the driver with nvidia-smi, or pass --nproc-per-node to run "
                              "CPU processes", code="no-gpu-visible")
    if visible and chosen.value < len(visible):
        warnings.append(f"using {chosen.value} of {len(visible)} visible GPUs ({_say(chosen)})")
    return chosen.value


# --- nodes -------------------------------------------------------------------------------

def read_world_size(topo: Topology, nproc: int) -> tuple[str, str]:
    """Which reading of WORLD_SIZE applies, and why (see the module docstring)."""
    ws = topo.world_size
    assert ws is not None
    if topo.world_size_means is not None:
        return topo.world_size_means.value, f"forced by {topo.world_size_means.source}"
    if topo.nnodes is not None:
        n = topo.nnodes.value
        if ws.value == n:
            return "nodes", f"WORLD_SIZE={ws.value} equals {_say(topo.nnodes)}"
        if ws.value == n * nproc:
            return "processes", (f"WORLD_SIZE={ws.value} equals {_say(topo.nnodes)} x "
                                 f"{nproc} processes per node")
        raise UsageError(
            f"WORLD_SIZE={ws.value} is neither the node count ({_say(topo.nnodes)}) nor "
            f"nodes x processes per node ({n} x {nproc} = {n * nproc})", subject="WORLD_SIZE",
            hint="unset WORLD_SIZE or fix it; --world-size-means nodes|processes forces a reading",
            code="world-size-contradiction")
    return "nodes", ("no other node count to cross-check: the platforms that export WORLD_SIZE "
                     "alone (PAI-DLC, KubeBrain, Volcano, older PyTorchJob) mean nodes")


def _nnodes(topo: Topology, nproc: int, source: dict[str, str]) -> tuple[int, str]:
    reading = ""
    nnodes = topo.nnodes
    if topo.world_size is not None:
        means, why = read_world_size(topo, nproc)
        reading = f"WORLD_SIZE read as {means}: {why}"
        ws = topo.world_size.value
        if means == "processes":
            if ws % nproc:
                raise UsageError(
                    f"WORLD_SIZE={ws} processes is not a multiple of {nproc} processes per node",
                    subject="WORLD_SIZE", hint="fix WORLD_SIZE or --nproc-per-node, or use "
                                               "--world-size-means nodes",
                                               code="world-size-contradiction")
            from_ws = Sourced(ws // nproc, f"WORLD_SIZE={ws} / {nproc} processes per node")
        else:
            from_ws = Sourced(ws, "WORLD_SIZE")
        if nnodes is None or not nnodes.explicit:
            nnodes = from_ws
        elif from_ws.value != nnodes.value:  # only a forced reading gets here
            raise UsageError(
                f"WORLD_SIZE={ws} read as {means} ({why}) means {from_ws.value} nodes, but "
                f"{_say(nnodes)}", subject="WORLD_SIZE",
                hint="fix WORLD_SIZE or the node count, or force the other reading of WORLD_SIZE",
                code="world-size-contradiction")
    elif topo.world_size_means is not None:
        reading = f"{topo.world_size_means.source} given but WORLD_SIZE is not set"
    if nnodes is None and "kubernetes-indexed-job" in topo.platforms:
        # Index 0 alone would plan a single node and wait for nobody while pods 1.. fail:
        # every pod must fail the same way, at once.
        raise UsageError(
            f"{_say(topo.node_rank)} (Kubernetes Indexed Job) but nothing set the node count: "
            "an Indexed Job does not export spec.completions", subject="MESHRUN_NNODES",
            hint="set MESHRUN_NNODES to spec.completions in the pod template (meshrun render "
                 "k8s does), or pass --nnodes", code="node-count-missing")
    if nnodes is None:
        source["nnodes"] = "default: nothing names a node count, so a single node"
        return 1, reading
    source["nnodes"] = nnodes.source
    return int(nnodes.value), reading


def _min_nodes(topo: Topology, nnodes: int, seated: int, source: dict[str, str]) -> int | None:
    """``--nnodes MIN:MAX``'s MIN: the fewest training nodes the job shrinks to (None: no
    shrinking). MAX counts every node the platform starts, spares included; MIN counts
    training nodes, so it may be at most the nodes that train at the start."""
    low = getattr(topo.nnodes.value, "low", None) if topo.nnodes is not None else None
    if low is not None and low > seated:
        raise UsageError(f"{_say(topo.nnodes)}: MIN {low} is more than the {seated} nodes that "
                         f"train ({nnodes} started, {nnodes - seated} of them spares)",
                         subject=topo.nnodes.source, code="elastic-range",
                         hint=f"MIN counts training nodes: give at most {seated}, e.g. "
                              f"--nnodes {seated - 1 or 1}:{nnodes}")
    if low is None or low >= seated:
        if low is not None:
            source["nnodes"] += f"; shrinks to no fewer than {low} (all {seated} train: none)"
        return None
    source["nnodes"] += f"; shrinks to no fewer than {low} training nodes on a loss"
    return low


def _node_rank(topo: Topology, nnodes: int, source: dict[str, str]) -> int:
    rank = topo.node_rank
    if rank is None:
        if nnodes > 1:
            raise UsageError(f"{nnodes} nodes but nothing says which one this is",
                             subject="--node-rank",
                             hint="pass --node-rank (0 on the master, 1.. on the others) or set "
                                  "MESHRUN_NODE_RANK", code="node-rank-missing")
        source["node_rank"] = "default: the only node"
        return 0
    if rank.value >= nnodes:
        hint = f"give each node a rank in 0..{nnodes - 1}, or fix the node count"
        if topo.nnodes is None and topo.world_size is None:
            hint = "nothing set the node count: pass --nnodes or set MESHRUN_NNODES"
        raise UsageError(f"{_say(rank)} is not below the node count {nnodes} "
                         f"({source['nnodes']}); node ranks run 0..{nnodes - 1}",
                         subject=rank.source, hint=hint, code="node-rank-out-of-range")
    source["node_rank"] = rank.source
    return rank.value


def _spares(topo: Topology, nnodes: int, source: dict[str, str]) -> int:
    """``--spares K``: the K highest node ranks wait as hot spares; at least one node trains."""
    spares = topo.spares
    if spares is None or spares.value == 0:
        return 0
    if spares.value >= nnodes:
        raise UsageError(f"{_say(spares)} leaves no node to train: the job has {nnodes} "
                         f"node{'s' if nnodes != 1 else ''} ({source['nnodes']}), spares "
                         "included", subject=spares.source, code="bad-spares",
                         hint=f"--nnodes counts every node the platform starts, spares "
                              f"included: for {nnodes} training nodes and {spares.value} "
                              f"spare{'s' if spares.value != 1 else ''} give --nnodes "
                              f"{nnodes + spares.value}")
    source["spares"] = spares.source
    return spares.value


def _one_agent_per_node(topo: Topology, nproc: int) -> None:
    agents = topo.local_agents
    if agents is not None and agents.value > 1:
        launcher = "srun" if "SLURM" in agents.source else "mpirun"
        fix = ("srun --ntasks-per-node=1 meshrun run ..." if launcher == "srun"
               else "mpirun --map-by ppr:1:node meshrun run ...")
        raise UsageError(
            f"{launcher} started {agents.value} meshrun copies on this node ({agents.source}); "
            f"each would start all {nproc} workers (duplicate GPUs, {agents.value * nproc} "
            "processes)", subject=agents.source, hint=f"start one per node: {fix}",
            code="several-agents-per-node")


def _master_addr(topo: Topology, nnodes: int, source: dict[str, str], facts: HostFacts) -> str:
    addr = topo.master_addr
    if addr is None or (nnodes > 1 and addr.source.startswith("default")):
        if nnodes > 1:
            why = (f": {addr.value} is only the {addr.source}, which other nodes cannot reach"
                   if addr is not None else "")
            raise UsageError(f"{nnodes} nodes ({source['nnodes']}) but no master address{why}",
                             subject="--master-addr",
                             hint="pass --master-addr (or set MESHRUN_MASTER_ADDR or MASTER_ADDR) "
                                  "with node 0's address, the same on every node",
                                  code="master-addr-missing")
        source["master_addr"] = "default: single node, loopback"
        return "127.0.0.1"
    # Bare, as getaddrinfo and torch's TCPStore take it: [fd00::1] is stored as fd00::1.
    value = unbracket(str(addr.value))
    problem = host_problem(value)
    if problem == HAS_PORT:
        raise UsageError(f"{_say(addr)} {problem}", subject=addr.source,
                         hint="give the port separately with --master-port / MASTER_PORT "
                              "(an IPv6 address alone: fd00::1 or [fd00::1])",
                              code="bad-master-addr")
    if problem:
        raise UsageError(f"{_say(addr)} {problem}", subject=addr.source,
                         hint="give a bare host or address like 10.0.0.1, fd00::1 or node-0.svc",
                         code="bad-master-addr")
    source["master_addr"] = addr.source
    return value


def _master_port(topo: Topology, nnodes: int, source: dict[str, str]) -> int:
    port = topo.master_port
    if port is None:
        if nnodes == 1:
            source["master_port"] = "single node: a free port is chosen at launch"
            return 0
        source["master_port"] = f"default ({DEFAULT_MASTER_PORT})"
        return DEFAULT_MASTER_PORT
    if not 1 <= port.value <= 65535:
        raise UsageError(f"{_say(port)} is outside 1..65535", subject=port.source,
                         hint="pick a free port such as 29500", code="port-out-of-range")
    source["master_port"] = port.source
    return port.value


def _run_id(topo: Topology, addr: str, port: int, nnodes: int,
            command: Command | None, source: dict[str, str]) -> str:
    if topo.run_id is not None:
        value = str(topo.run_id.value)
        if not RUN_ID.match(value):
            raise UsageError(f"{_say(topo.run_id)} is not a usable run id", subject=topo.run_id.source,
                             hint="use letters, digits, '.', '_' and '-' (at most 128), starting "
                                  "with a letter or digit", code="bad-run-id")
        source["run_id"] = topo.run_id.source
        return value
    # Identical on every node without talking: a hash of what every node agrees on.
    seed = f"{addr}|{port}|{nnodes}|{command.display() if command else ''}"
    digest = hashlib.sha256(seed.encode()).hexdigest()[:10]
    source["run_id"] = ("hash of master address, port, node count and command (no platform job "
                        "id; pass --run-id to tell reruns apart)")
    return f"mr-{digest}"


# --- environment for the workers ---------------------------------------------------------

def threads_for(env: Mapping[str, str], nproc: int, cpus: int, simulated_workers: int,
                nnodes: int) -> EnvVar | None:
    """``OMP_NUM_THREADS`` for the workers, or None to leave it alone. Pure.

    A value the user set is kept. ``meshrun run``: 1 when several processes share the node
    (torchrun's rule), else torch's own default (every core). ``meshrun simulate``: every
    simulated node's workers share this one host, so each gets ``max(1, cpus // workers)``:
    otherwise N nodes x M workers each start a thread per core and fight over them."""
    if "OMP_NUM_THREADS" in env:
        return None
    if simulated_workers > 0:
        threads = max(1, cpus // simulated_workers)
        nodes = f"{nnodes} simulated node{'s' if nnodes != 1 else ''}"
        return EnvVar("OMP_NUM_THREADS", str(threads),
                      f"{simulated_workers} worker{'s' if simulated_workers != 1 else ''} of "
                      f"{nodes} share this host's {cpus} CPU{'s' if cpus != 1 else ''}: "
                      f"max(1, {cpus} // {simulated_workers}) = {threads} thread"
                      f"{'s' if threads != 1 else ''} each (set OMP_NUM_THREADS to override)")
    if nproc > 1:
        return EnvVar("OMP_NUM_THREADS", "1", f"{nproc} processes share this node's CPUs "
                      "(torchrun's default; set OMP_NUM_THREADS to override)")
    return None


def _worker_env(env: Mapping[str, str], visible: Sequence[str], gpu_mode: bool, nproc: int,
                nnodes: int, node_rank: int, run_id: str, backend: str,
                log_dir: str, threads: EnvVar | None = None) -> list[EnvVar]:
    out: list[EnvVar] = []
    if gpu_mode:
        out.append(EnvVar("CUDA_VISIBLE_DEVICES", ",".join(visible),
                          "this node's own GPUs, one per local rank"))
    if threads is not None:
        out.append(threads)
    out += [
        EnvVar("MESHRUN_RUN_ID", run_id, "the job's run id, for scripts and logs"),
        EnvVar("MESHRUN_NNODES", str(nnodes), "node count, for scripts"),
        EnvVar("MESHRUN_NODE_RANK", str(node_rank), "this node's rank, for scripts"),
        EnvVar("MESHRUN_BACKEND", backend, "process-group backend for meshrun.init_distributed"),
        EnvVar("MESHRUN_LOG_DIR", log_dir, "this run's log folder"),
    ]
    if gpu_mode and "TORCH_NCCL_ENABLE_TIMING" not in env and \
            env.get("MESHRUN_OBSERVE", "").strip().lower() == "timing":
        out.append(EnvVar("TORCH_NCCL_ENABLE_TIMING", "1",
                          "MESHRUN_OBSERVE=timing: NCCL times each collective, and meshrun's "
                          "observer reads how long each rank waits in them (slow nodes)"))
    return out


def _say(value: Sourced) -> str:
    name = value.source
    if name.startswith("--"):
        return f"{name} {value.value}"
    if name.replace("_", "").isalnum() and name.isupper():
        return f"{name}={value.value}"
    return f"{value.value} ({name})"



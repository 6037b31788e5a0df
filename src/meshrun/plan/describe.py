"""The plan as people read it: an aligned ``key : value`` block with where each value came
from (``meshrun plan`` prints it; every node writes it to its log, and prints it with
``--verbose``), and the short banner a node prints by default (:func:`brief`). Pure."""

from __future__ import annotations

from collections.abc import Sequence

from ..topology.address import join_host_port
from .model import LaunchPlan


def rank_span(ranks: Sequence[int]) -> str:
    """``0-7`` for a run of ranks, ``3`` for one, ``""`` for none (a spare)."""
    if not ranks:
        return ""
    return f"{ranks[0]}-{ranks[-1]}" if len(ranks) > 1 else str(ranks[0])


def ranks_phrase(ranks: Sequence[int]) -> str:
    """``ranks 0-7``, or ``rank 3`` for a node with one worker."""
    return f"rank{'s' if len(ranks) > 1 else ''} {rank_span(ranks)}"


def describe(plan: LaunchPlan) -> str:
    """The plan as an aligned ``key : value`` block (the run banner uses it too)."""
    rank_text = rank_span(plan.global_ranks)
    port = str(plan.master_port) if plan.master_port else "auto"
    devices = (f"GPUs {','.join(plan.visible_devices)}"
               + (f" ({plan.gpu_names[0]})" if plan.gpu_names else "")
               if plan.device == "cuda" else "CPU")
    src = plan.source
    rows = [
        ("platform", plan.platform, ", ".join(plan.platforms[1:]) and
         "also seen: " + ", ".join(plan.platforms[1:])),
        ("nodes", str(plan.nnodes) + (f" ({plan.seated_nodes} training, {plan.spares} "
                                       f"spare{'s' if plan.spares != 1 else ''})"
                                       if plan.spares else ""),
         src.get("nnodes", "") + (f"; spares: {src.get('spares', '')}" if plan.spares else "")),
        ("node rank", str(plan.node_rank), src.get("node_rank", "")),
        ("master", join_host_port(plan.master_addr, port),
         f"{src.get('master_addr', '')}; port: {src.get('master_port', '')}"),
        ("processes per node", str(plan.nproc_per_node), src.get("nproc_per_node", "")),
        ("devices", devices, ""),
        ("world size", str(plan.world_size),
         f"{plan.seated_nodes} node{'s' if plan.seated_nodes != 1 else ''} x "
         f"{plan.nproc_per_node}"),
        ("global ranks", rank_text or "none yet: a spare, it takes a lost node's ranks",
         f"on {plan.hostname}"),
        ("backend", plan.backend, src.get("backend", "")),
        ("run id", plan.run_id, src.get("run_id", "")),
        ("log dir", plan.log_dir, src.get("log_dir", "")),
    ]
    if plan.world_size_reading:
        rows.append(("WORLD_SIZE", plan.world_size_reading, ""))
    if plan.command:
        from ..redact import redact_argv

        rows.append(("command", " ".join(redact_argv(plan.command.argv())), ""))
    width = max(len(key) for key, _, _ in rows)
    vwidth = min(24, max(len(value) for _, value, _ in rows))
    lines = [f"meshrun {plan.version}"]
    for key, value, why in rows:
        line = f"  {key.ljust(width)} : {value.ljust(vwidth)}"
        if why:
            line += f"  ({why})"
        lines.append(line.rstrip())
    for var in plan.env:
        value = var.value if len(var.value) <= 80 else f"<{len(var.value)} bytes>"
        lines.append(f"  {'env'.ljust(width)} : {var.name}={value}  ({var.reason})")
    if plan.job is not None:
        lines.append("job config")
        lines += plan.job.describe_lines()
    for warning in plan.warnings:
        lines.append(f"  {'warning'.ljust(width)} : {warning}")
    for note in plan.notes:
        lines.append(f"  {'note'.ljust(width)} : {note}")
    return "\n".join(lines)


def brief(plan: LaunchPlan, node_log: str) -> str:
    """The banner a node prints by default: who it is in the job, what it runs, where its logs
    go, and the plan's warnings (a few lines, not the whole plan: that is in ``node_log``)."""
    ranks = rank_span(plan.global_ranks)
    workers = f"{plan.nproc_per_node} worker{'s' if plan.nproc_per_node != 1 else ''}"
    gpus = len(plan.visible_devices)
    devices = f"{gpus} GPU{'s' if gpus != 1 else ''}" if plan.device == "cuda" else "CPU"
    place = (f"{workers}: {ranks_phrase(plan.global_ranks)} of {plan.world_size}" if ranks
             else f"a spare ({workers} when it takes a lost node's seat)")
    spares = (f" ({plan.seated_nodes} training, {plan.spares} spare"
              f"{'s' if plan.spares != 1 else ''})" if plan.spares else "")
    lines = [f"meshrun {plan.version}: node {plan.node_rank} of {plan.nnodes}{spares} on "
             f"{plan.hostname} (platform: {plan.platform}), {place}, {devices}, "
             f"{plan.backend}; run id {plan.run_id}"]
    if plan.command:
        from ..redact import redact_argv

        lines.append(f"  command : {' '.join(redact_argv(plan.command.argv()))}")
    lines.append(f"  logs    : {plan.log_dir} (the whole plan, each value's source, the "
                 f"workers' environment: {node_log}; --verbose prints it here)")
    if plan.world_size_reading:  # how an ambiguous WORLD_SIZE was read: always said
        lines.append(f"  reading : {plan.world_size_reading}")
    lines += [f"  warning : {warning}" for warning in plan.warnings]
    return "\n".join(lines)

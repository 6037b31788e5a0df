"""``meshrun render slurm``: an sbatch script with one task per node running ``srun meshrun run``.

The node count is written once (``#SBATCH --nodes``); ``srun`` inherits it and the
one task per node from the allocation, so nothing repeats a count. Each task's meshrun
reads its own ``SLURM_NNODES``, ``SLURM_NODEID``, node list and job id (master port
15000 + the job id's last four digits, run id ``slurm-<job>.<step>``) and starts that
node's workers, one per GPU of ``--gpus-per-node`` (``SLURM_GPUS_ON_NODE``), or
``--nproc-per-node`` CPU processes. The script itself expands no variable: every word
of the command is single-quoted where it needs quoting, so ``$`` in an argument reaches
the training script as written and no per-node value is computed once in the batch
shell (the classic "every node is rank 0" bug).

``--cpus-per-task`` is always written, in ``#SBATCH`` and again on ``srun`` (since SLURM
22.05 a step no longer inherits it) (``--cpus-per-node``, or 4 per GPU worker and 1 per
CPU worker): clusters that give a task one CPU by default would have the agent, every
worker and its data loaders share it. ``--setup`` lines (``module load cuda``, ``source
venv/bin/activate``) run in the batch shell before ``srun``, whose tasks inherit the
environment they leave (SLURM's default ``--export=ALL``); a failing one stops the script.

``srun --kill-on-bad-exit=1`` stops the other nodes as soon as one node's meshrun
fails, instead of leaving them blocked in a collective until its timeout.

A multi-node script draws the job token (``MESHRUN_JOB_TOKEN``, docs/security.md) in the
batch shell from ``/dev/urandom``, once, before ``srun``: every node's meshrun inherits the
same secret, which is never written to the file (``meshrun render --no-token``: none).
"""

from __future__ import annotations

import shlex

from .spec import RenderSpec


def render_slurm(spec: RenderSpec) -> str:
    """The sbatch script for ``spec`` (submit with ``sbatch FILE``)."""
    lines = ["#!/bin/bash", *spec.header("submit: sbatch FILE")]
    sbatch = [f"--job-name={spec.job_name}", f"--nodes={spec.nnodes}", "--ntasks-per-node=1"]
    if spec.gpus_per_node:
        sbatch.append(f"--gpus-per-node={spec.gpus_per_node}")
    if spec.cpus_per_node:
        sbatch.append(f"--cpus-per-task={spec.cpus_per_node}")
    for flag, value in (("--partition", spec.partition), ("--time", spec.time_limit),
                        ("--account", spec.account)):
        if value:
            sbatch.append(f"{flag}={value}")
    sbatch.append("--output=%x-%j.out")
    lines += [f"#SBATCH {option}" for option in sbatch]
    lines += ["",
              "# One meshrun per node: each reads SLURM_NNODES, SLURM_NODEID, the node list",
              "# and the job id itself, then starts this node's workers."]
    exports = []
    if spec.run_id:
        exports.append(("MESHRUN_RUN_ID", spec.run_id))
    if spec.log_dir:
        exports.append(("MESHRUN_LOG_DIR", spec.log_dir))
    exports += list(spec.env)
    lines += [f"export {name}={shlex.quote(value)}" for name, value in exports]
    if spec.signed:
        # drawn here, once, for every node (srun's tasks inherit it): never in the file, in
        # the job's environment only (readable by you and root); one exported before sbatch
        # is kept
        lines += ["# the job token (docs/security.md): a fresh secret for this job",
                  'export MESHRUN_JOB_TOKEN="${MESHRUN_JOB_TOKEN:-$(head -c 32 /dev/urandom '
                  "| od -An -tx1 | tr -d ' \\n')}\""]
    if spec.setup:
        # as written (module load, source venv/bin/activate): srun's tasks inherit the
        # environment this shell has when it reaches srun
        lines += ["", "# set-up (--setup), run once here before srun", "set -e",
                  *spec.setup, "set +e", ""]
    # srun does not take --cpus-per-task from sbatch (SLURM >= 22.05): said again for the step
    cpus = [f"--cpus-per-task={spec.cpus_per_node}"] if spec.cpus_per_node else []
    lines.append(shlex.join(["srun", "--kill-on-bad-exit=1", *cpus, *spec.meshrun,
                             *spec.run_args()]))
    return "\n".join(lines) + "\n"


__all__ = ["render_slurm"]

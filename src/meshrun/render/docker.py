"""``meshrun render docker``: the ``docker run`` line for one node, the same on every node.

The script is identical on every node; the node's index comes from ``NODE_RANK``, which
you set when you start it (``NODE_RANK=0 sh run.sh`` on node 0, ``NODE_RANK=1 sh run.sh``
on the next, ...). A missing ``NODE_RANK`` stops the script before docker starts
(``${NODE_RANK:?...}``). Single-node files need no ``NODE_RANK``.

Flags, and why:

- ``--gpus all`` (GPU jobs): every GPU of the host; meshrun starts one worker per GPU.
- ``--ipc=host``, or ``--shm-size`` when a size is given: PyTorch's data loader workers
  and NCCL pass data through ``/dev/shm``; docker's default is 64 MiB.
- ``--network=host``: the store port and NCCL/gloo's ephemeral ports are the host's own,
  and NCCL sees the real interfaces (not a bridge).
- with ``--infiniband``: ``--device=/dev/infiniband`` (the HCAs), ``--ulimit memlock=-1``
  and ``--cap-add=IPC_LOCK`` (RDMA pins memory).
- ``-e MESHRUN_NNODES/MESHRUN_NODE_RANK/MESHRUN_MASTER_ADDR/MESHRUN_MASTER_PORT``: the
  node values meshrun reads (``MESHRUN_*`` beat anything the image sets); ``--env``
  values, a fixed run id and the log folder likewise.
- ``--log-dir`` given as an absolute path is mounted at the same path, so the logs
  outlive the ``--rm`` container; ``--volume host:DIR:PATH[:ro]`` mounts more.
- ``-e MESHRUN_JOB_TOKEN`` (several nodes): the job token from the host's environment, the
  same on every node; the script stops before docker starts when it is not set. It is never
  written in the file (``meshrun render --no-token``: none).
"""

from __future__ import annotations

import posixpath
import shlex

from .spec import RenderSpec, docker_size

NODE_RANK_VAR = "NODE_RANK"


def render_docker(spec: RenderSpec) -> str:
    """A ``#!/bin/sh`` script holding the ``docker run`` line for any node of ``spec``."""
    how = (f"run on every node: {NODE_RANK_VAR}=<this node's index, 0 on "
           f"{spec.master_addr}> sh FILE" if spec.nnodes > 1 else "run: sh FILE")
    words = ["docker", "run", "--rm"]
    if spec.gpus_per_node:
        words += ["--gpus", "all"]
    words += [f"--shm-size={docker_size(spec.shm_bytes())}"] if spec.shm_size else ["--ipc=host"]
    words.append("--network=host")
    if spec.infiniband:
        words += ["--device=/dev/infiniband", "--ulimit", "memlock=-1", "--cap-add=IPC_LOCK"]
    if spec.log_dir and posixpath.isabs(spec.log_dir) and not _under_a_volume(spec):
        words += ["-v", f"{spec.log_dir}:{spec.log_dir}"]
    for _kind, source, path, mode in spec.volumes:   # host folders only (validated)
        words += ["-v", f"{source}:{path}" + (":ro" if mode == "ro" else "")]
    parts = [shlex.join(words)]
    env: list[tuple[str, str | None]] = []
    if spec.nnodes > 1:
        env += [("MESHRUN_NNODES", str(spec.nnodes)), ("MESHRUN_NODE_RANK", None),
                ("MESHRUN_MASTER_ADDR", spec.master_addr),
                ("MESHRUN_MASTER_PORT", str(spec.master_port))]
    if spec.run_id:
        env.append(("MESHRUN_RUN_ID", spec.run_id))
    if spec.log_dir:
        env.append(("MESHRUN_LOG_DIR", spec.log_dir))
    env += list(spec.env)
    for name, value in env:
        if value is None:  # the one per-node value, expanded by the shell on each node
            parts.append(f'-e {name}="${{{NODE_RANK_VAR}:?set {NODE_RANK_VAR} to this node '
                         f'index, 0 to {spec.nnodes - 1}}}"')
        else:
            parts.append(shlex.join(["-e", f"{name}={value}"]))
    guard = []
    if spec.signed:  # the host's value, never written here (docs/security.md)
        parts.append("-e MESHRUN_JOB_TOKEN")
        guard = ['# the job token: the same secret on every node, in the environment (e.g. '
                 'once: python3 -c "import secrets; print(secrets.token_urlsafe(32))")',
                 ': "${MESHRUN_JOB_TOKEN:?set MESHRUN_JOB_TOKEN to the job token, the same '
                 'secret of at least 16 characters on every node}"']
    parts.append(shlex.join([spec.image, *spec.meshrun, *spec.run_args()]))
    lines = ["#!/bin/sh", *spec.header(how), *guard, " \\\n  ".join(parts)]
    return "\n".join(lines) + "\n"


def _under_a_volume(spec: RenderSpec) -> bool:
    """The log folder is inside a ``--volume``'s mount path (two mounts at one path would
    stop docker: "Duplicate mount point")."""
    inside = posixpath.normpath(spec.log_dir) + "/"
    return any(inside.startswith(posixpath.normpath(path).rstrip("/") + "/")
               for _kind, _source, path, _mode in spec.volumes)


__all__ = ["render_docker"]

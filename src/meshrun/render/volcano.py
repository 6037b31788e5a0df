"""``meshrun render volcano``: a Volcano Job (``batch.volcano.sh/v1alpha1``).

One task ``node`` with ``replicas = minAvailable = nodes`` (gang scheduling: all pods
start together or none), ``schedulerName: volcano`` and two plugins:

- ``svc`` (``--publish-not-ready-addresses``): a headless Service ``<job>``, pod host
  names ``<job>-node-<i>.<job>``, ``VC_NODE_NUM`` and ``VC_NODE_HOSTS`` (every pod's
  host name, comma-separated) in every container, and a NetworkPolicy that admits only
  the job's own pods;
- ``env``: ``VC_TASK_INDEX`` (and ``VK_TASK_INDEX``), the pod's index in its task.

meshrun reads those (node count ``VC_NODE_NUM``, node rank ``VC_TASK_INDEX``, master the
first host of ``VC_NODE_HOSTS``); the manifest adds only ``MESHRUN_MASTER_PORT``.
Policies: an evicted pod restarts the whole job (a node drained under it); a failed pod
terminates it, or restarts it up to ``--backoff-limit`` times (``maxRetry``).
The run id is meshrun's hash of master, port, node count and command (Volcano exports
no job uid).
"""

from __future__ import annotations

from .cluster import apply_patches
from .k8s import container, labels, metadata, pod_spec, with_token
from .spec import RenderSpec, dump_yaml

TASK = "node"


def render_volcano(spec: RenderSpec) -> str:
    """A Volcano Job running ``meshrun run`` on every pod of its one task."""
    env = [{"name": "MESHRUN_MASTER_PORT", "value": str(spec.master_port)}]
    main = container(spec, "train", env,
                     ports=[{"name": "store", "containerPort": spec.master_port}])
    on_failure = "RestartJob" if spec.backoff_limit else "TerminateJob"
    job_spec: dict = {
        "schedulerName": "volcano",
        "minAvailable": spec.nnodes,
    }
    if spec.backoff_limit:
        job_spec["maxRetry"] = spec.backoff_limit
    job_spec.update({
        "plugins": {"svc": ["--publish-not-ready-addresses"], "env": []},
        "policies": [{"event": "PodEvicted", "action": "RestartJob"},
                     {"event": "PodFailed", "action": on_failure}],
        "tasks": [{
            "name": TASK,
            "replicas": spec.nnodes,
            "template": {"metadata": {"labels": labels(spec)},
                         "spec": pod_spec(spec, main, restart_policy="Never")},
        }],
    })
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": metadata(spec),
           "spec": job_spec}
    return dump_yaml(spec.header("submit: kubectl apply -f FILE   (needs Volcano; "
                                 "vcctl job list shows it)"),
                     apply_patches(spec, with_token(spec, [job])))


__all__ = ["render_volcano"]

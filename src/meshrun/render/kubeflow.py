"""``meshrun render pytorchjob`` (Kubeflow PyTorchJob v1) and ``meshrun render trainjob``
(Kubeflow Trainer v2). Both operators export torchrun's variables; meshrun reads them as
they are, so the container runs ``meshrun run -- SCRIPT`` with no node values at all.

**PyTorchJob** (``kubeflow.org/v1``, the training operator): replica ``Master`` (1 pod)
and ``Worker`` (nodes - 1 pods), container ``pytorch`` (the operator's required name)
with the store port as the ``pytorchjob-port`` container port. ``spec.nprocPerNode``
holds the processes per node; the operator then exports per pod ``PET_NNODES``,
``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``/``RANK`` (master 0, worker i -> i + 1),
``WORLD_SIZE`` (pods x nprocPerNode), ``MASTER_ADDR``/``PET_MASTER_ADDR`` =
``<job>-master-0`` and ``MASTER_PORT`` (envvar.go). meshrun reads ``WORLD_SIZE`` as
processes because it equals ``PET_NNODES`` x processes, and takes the run id
``pytorchjob-<job>``. ``restartPolicy`` is ``Never`` with ``runPolicy.backoffLimit`` 0
(a failed pod fails the job), ``OnFailure`` when a backoff limit is given; the operator
copies it into the pods.

**TrainJob** (``trainer.kubeflow.org/v1alpha1``): refers to the ``torch-distributed``
ClusterTrainingRuntime; ``trainer.numNodes`` and ``trainer.numProcPerNode`` are the
counts; the torch plugin exports ``PET_NNODES``, ``PET_NPROC_PER_NODE``,
``PET_NODE_RANK`` (the JobSet's completion index), ``PET_MASTER_ADDR=<job>-node-0-0.<job>``
and ``PET_MASTER_PORT=29500`` (fixed by the operator), and nothing else; meshrun takes
the run id ``trainjob-<job>``. The runtime owns the pod template, so a shared-memory
size, InfiniBand's ``IPC_LOCK``, ``--volume``s and where and as whom the pods run
(node selector, tolerations, service account, pull secrets) are added as a
``runtimePatches`` entry (manager ``meshrun``), written only when a flag asks for them:
that API is Trainer's newest (it replaced ``podTemplateOverrides``); without those
flags the file uses only fields every Trainer v2 release has.
"""

from __future__ import annotations

from . import cluster
from .k8s import (
    common_env,
    container,
    labels,
    metadata,
    pod_spec,
    resources,
    shm_volume,
    token_env,
    with_token,
)
from .spec import RenderSpec, dump_yaml, kube_escape

PYTORCHJOB_CONTAINER = "pytorch"          # the training operator's default container name
PYTORCHJOB_PORT_NAME = "pytorchjob-port"  # the port the operator reads MASTER_PORT from
TRAINJOB_RUNTIME = "torch-distributed"
TRAINJOB_CONTAINER = "node"               # the runtime's trainer container
PATCH_MANAGER = "meshrun"


def render_pytorchjob(spec: RenderSpec) -> str:
    """A Kubeflow PyTorchJob running ``meshrun run`` in every replica."""
    restart = "OnFailure" if spec.backoff_limit else "Never"

    def replica(count: int) -> dict:
        main = container(spec, PYTORCHJOB_CONTAINER, [], nproc=False,
                         ports=[{"name": PYTORCHJOB_PORT_NAME, "containerPort": spec.master_port,
                                 "protocol": "TCP"}])
        return {"replicas": count, "restartPolicy": restart,
                "template": {"metadata": {"labels": labels(spec)},
                             "spec": pod_spec(spec, main, restart_policy=None)}}

    replicas = {"Master": replica(1)}
    if spec.nnodes > 1:
        replicas["Worker"] = replica(spec.nnodes - 1)
    job = {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": metadata(spec),
        "spec": {
            "nprocPerNode": str(spec.nproc_per_node),
            "runPolicy": {"backoffLimit": spec.backoff_limit},
            "pytorchReplicaSpecs": replicas,
        },
    }
    return dump_yaml(spec.header("submit: kubectl apply -f FILE   (needs the Kubeflow training "
                                 "operator)"), cluster.apply_patches(spec, with_token(spec, [job])))


def render_trainjob(spec: RenderSpec) -> str:
    """A Kubeflow Trainer v2 TrainJob on the torch-distributed runtime."""
    trainer: dict = {
        "image": spec.image,
        "command": [kube_escape(word) for word in spec.meshrun],
        "args": [kube_escape(word) for word in spec.run_args(nproc=False)],
        "numNodes": spec.nnodes,
        "numProcPerNode": spec.nproc_per_node,
    }
    res = resources(spec)
    if res:
        trainer["resourcesPerNode"] = res
    env = common_env(spec) + token_env(spec) + cluster.secret_env_vars(spec)
    if env:
        trainer["env"] = env
    job_spec: dict = {"runtimeRef": {"name": TRAINJOB_RUNTIME}, "trainer": trainer}
    patch = _runtime_patch(spec)
    if patch:
        job_spec["runtimePatches"] = [patch]
    job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
           "metadata": metadata(spec), "spec": job_spec}
    return dump_yaml(spec.header("submit: kubectl apply -f FILE   (needs Kubeflow Trainer v2 "
                                 f"and its {TRAINJOB_RUNTIME} runtime)"),
                     cluster.apply_patches(spec, with_token(spec, [job])))


def _runtime_patch(spec: RenderSpec) -> dict | None:
    placement = cluster.pod_placement(spec)
    if not (spec.shm_size or spec.infiniband or spec.volumes or placement):
        return None
    node: dict = {"name": TRAINJOB_CONTAINER}
    pod: dict = dict(placement)
    mounts = [{"name": shm_volume(spec)["name"], "mountPath": "/dev/shm"}] \
        if spec.shm_size else []
    volumes = [shm_volume(spec)] if spec.shm_size else []
    mounts += cluster.volume_mounts(spec)
    volumes += cluster.pod_volumes(spec)
    if mounts:
        node["volumeMounts"] = mounts
        pod["volumes"] = volumes
    if spec.infiniband:
        node["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    pod["containers"] = [node]
    return {"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": TRAINJOB_CONTAINER, "template": {"spec": {"template": {
            "spec": pod}}}}]}}}}


__all__ = ["render_pytorchjob", "render_trainjob"]

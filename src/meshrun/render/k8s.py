"""``meshrun render k8s``: a Kubernetes Indexed Job, its headless Service and a NetworkPolicy.

One file, three objects, applied with ``kubectl apply -f FILE``:

- **Service** ``<job>`` (headless, ``publishNotReadyAddresses``): gives each pod the DNS
  name ``<job>-<index>.<job>``, so node 0 is ``<job>-0.<job>`` from the first second.
- **NetworkPolicy** ``<job>``: the job's pods accept connections only from pods of the
  same job (label ``meshrun/job=<job>``), on the store port (c10d rendezvous, the job's
  TCPStore on node 0) and on TCP 1024-65535, because gloo and NCCL's socket transport
  listen on ephemeral ports chosen at run time (no fixed range to name). Egress is not
  restricted. InfiniBand/RDMA traffic does not pass through the pod network and is not
  affected.
- **Job** ``<job>``: ``completionMode: Indexed``, ``completions = parallelism = nodes``,
  ``subdomain: <job>`` (the pods' host names are ``<job>-<index>``), ``restartPolicy:
  Never`` and ``backoffLimit`` (default 0: one failed pod fails the Job and its other
  pods are stopped, rather than a half-restarted job; ``meshrun run --max-restarts``
  restarts workers in place). GPUs per pod as ``nvidia.com/gpu`` limits, a memory-backed
  ``/dev/shm`` (PyTorch's data loader workers pass tensors through it; the container
  runtime's default is 64 MiB).

The container runs the same ``meshrun run ...`` on every pod. The Job exports only
``JOB_COMPLETION_INDEX`` (the node rank), so the manifest sets ``MESHRUN_NNODES``,
``MESHRUN_MASTER_ADDR=<job>-0.<job>`` and ``MESHRUN_MASTER_PORT``; the run id is the
Job's uid (label ``batch.kubernetes.io/controller-uid``, Kubernetes >= 1.27), the same
on every pod and new for every submission. Every ``$`` in the command is doubled
(:func:`~meshrun.render.spec.kube_escape`) so the kubelet's ``$(VAR)`` expansion leaves
the arguments as written.

The cluster's own options (``--volume``, ``--node-selector``, ``--toleration``,
``--service-account``, ``--image-pull-secret``, Secrets as variables, ``--patch``) are
written by :mod:`meshrun.render.cluster`'s pieces. The helpers below (labels, container,
pod volumes) are shared by the Kubeflow and Volcano renderers.
"""

from __future__ import annotations

from . import cluster
from .spec import RenderSpec, dump_yaml, kube_escape, quantity

LABEL = "meshrun/job"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
SHM_VOLUME = "dshm"
EPHEMERAL_PORTS = (1024, 65535)


def render_k8s(spec: RenderSpec) -> str:
    """The Service, NetworkPolicy and Indexed Job for ``spec``, as one YAML stream."""
    name = spec.job_name
    store_port = {"name": "store", "protocol": "TCP", "port": spec.master_port,
                  "targetPort": spec.master_port}
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": metadata(spec),
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "selector": labels(spec), "ports": [store_port]},
    }
    policy = {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": metadata(spec),
        "spec": {
            "podSelector": {"matchLabels": labels(spec)},
            "policyTypes": ["Ingress"],
            "ingress": [{
                "from": [{"podSelector": {"matchLabels": labels(spec)}}],
                "ports": [{"protocol": "TCP", "port": spec.master_port},
                          {"protocol": "TCP", "port": EPHEMERAL_PORTS[0],
                           "endPort": EPHEMERAL_PORTS[1]}],
            }],
        },
    }
    env = [
        {"name": "MESHRUN_NNODES", "value": str(spec.nnodes)},
        {"name": "MESHRUN_MASTER_ADDR", "value": f"{name}-0.{name}"},
        {"name": "MESHRUN_MASTER_PORT", "value": str(spec.master_port)},
    ]
    if not spec.run_id:
        env.append({"name": "MESHRUN_RUN_ID", "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.labels['{CONTROLLER_UID}']"}}})
    job = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": metadata(spec),
        "spec": {
            "completionMode": "Indexed",
            "completions": spec.nnodes,
            "parallelism": spec.nnodes,
            "backoffLimit": spec.backoff_limit,
            "template": {
                "metadata": {"labels": labels(spec)},
                "spec": pod_spec(spec, container(spec, "train", env,
                                                 ports=[{"name": "store",
                                                         "containerPort": spec.master_port}]),
                                 restart_policy="Never", subdomain=name),
            },
        },
    }
    return dump_yaml(spec.header("submit: kubectl apply -f FILE   (remove: kubectl delete -f "
                                 "FILE)"),
                     cluster.apply_patches(spec, with_token(spec, [service, policy, job])))


# --- shared by the Kubernetes-family renderers -------------------------------------------------

def labels(spec: RenderSpec) -> dict:
    return {LABEL: spec.job_name}


def metadata(spec: RenderSpec) -> dict:
    meta: dict = {"name": spec.job_name}
    if spec.namespace:
        meta["namespace"] = spec.namespace
    meta["labels"] = labels(spec)
    return meta


def env_var(name: str, value: str) -> dict:
    return {"name": name, "value": kube_escape(value)}


def common_env(spec: RenderSpec) -> list[dict]:
    """Variables every target sets the same way: a fixed run id, the log folder, --env."""
    out = []
    if spec.run_id:
        out.append(env_var("MESHRUN_RUN_ID", spec.run_id))
    if spec.log_dir:
        out.append(env_var("MESHRUN_LOG_DIR", spec.log_dir))
    out += [env_var(name, value) for name, value in spec.env]
    return out


def token_env(spec: RenderSpec) -> list[dict]:
    """MESHRUN_JOB_TOKEN from the job's token Secret (:func:`with_token`), when signed."""
    if not spec.signed:
        return []
    return [{"name": "MESHRUN_JOB_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": spec.token_secret, "key": "token"}}}]


def with_token(spec: RenderSpec, docs: list[dict]) -> list[dict]:
    """``docs`` after the Secret that holds the job's token (docs/security.md), when signed:
    a fresh one each render, the same for every pod of this submission."""
    if not spec.signed:
        return docs
    meta = {**metadata(spec), "name": spec.token_secret}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque",
              "stringData": {"token": spec.job_token}}
    return [secret, *docs]


def resources(spec: RenderSpec) -> dict:
    """GPUs as limits (extended resources are never overcommitted), CPUs as a request."""
    out: dict = {}
    if spec.gpus_per_node:
        out["limits"] = {"nvidia.com/gpu": quantity(spec.gpus_per_node)}
    if spec.cpus_per_node:
        out["requests"] = {"cpu": quantity(spec.cpus_per_node)}
    return out


def container(spec: RenderSpec, name: str, env: list[dict], *, ports: list[dict] | None = None,
              nproc: bool | None = None, shm: bool = True) -> dict:
    """The training container: ``meshrun run ...`` with ``env`` and :func:`common_env`."""
    out: dict = {
        "name": name,
        "image": spec.image,
        "command": [kube_escape(word) for word in spec.meshrun],
        "args": [kube_escape(word) for word in spec.run_args(nproc=nproc)],
    }
    all_env = env + common_env(spec) + token_env(spec) + cluster.secret_env_vars(spec)
    if all_env:
        out["env"] = all_env
    if spec.env_from_secrets:
        out["envFrom"] = cluster.env_from(spec)
    if ports:
        out["ports"] = ports
    res = resources(spec)
    if res:
        out["resources"] = res
    mounts = ([{"name": SHM_VOLUME, "mountPath": "/dev/shm"}] if shm else []) + \
        cluster.volume_mounts(spec)
    if mounts:
        out["volumeMounts"] = mounts
    if spec.infiniband:
        # RDMA registers (pins) memory: the container needs IPC_LOCK for an unlimited memlock.
        out["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    return out


def shm_volume(spec: RenderSpec) -> dict:
    empty_dir: dict = {"medium": "Memory"}
    if spec.shm_size:
        empty_dir["sizeLimit"] = spec.shm_size
    return {"name": SHM_VOLUME, "emptyDir": empty_dir}


def pod_spec(spec: RenderSpec, main: dict, *, restart_policy: str | None, **extra) -> dict:
    """Pod spec with ``main``, the shared-memory volume and ``--volume``'s, and where and as
    whom the pod runs (``restart_policy`` None: omitted)."""
    out = dict(extra)
    if restart_policy:
        out["restartPolicy"] = restart_policy
    out.update(cluster.pod_placement(spec))
    out["containers"] = [main]
    out["volumes"] = [shm_volume(spec), *cluster.pod_volumes(spec)]
    return out


__all__ = ["render_k8s"]

"""Submission files for every platform (``meshrun render k8s|pytorchjob|trainjob|volcano|slurm|
docker``): golden files, the Kubernetes schemas, the shell's own parsing, and the planner
reading exactly what each node of the rendered job would see.

Goldens live in tests/unit/golden/platforms/; regenerate them with
``MESHRUN_UPDATE_GOLDEN=1 pytest tests/unit/test_render_platforms.py`` and review the diff.
The meshrun version in the headers is replaced by ``<VERSION>`` before comparing.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from unit_fakes import gpus

from meshrun import __version__
from meshrun.cli import build_parser, flags_from, split_command
from meshrun.errors import EXIT_USAGE, UsageError
from meshrun.facts import HostFacts
from meshrun.plan import Command, make_plan
from meshrun.render.spec import PLATFORM_TARGETS, RenderSpec, render_platform, spec_from_flags

GOLDEN = Path(__file__).parent / "golden" / "platforms"
IMAGE = "registry.example/team/train:1.4"
# A space, a quote, '$', '$$' and a '$(VAR)' the k8s container defines: every layer (YAML,
# the kubelet's $(VAR) expansion, sh, bash) must hand these to the script unchanged.
TRICKY = ["--note", "two words", "--price", "$5 $(MESHRUN_NNODES) $$ it's", "yes"]
GPU2 = {"nnodes": "2", "gpus_per_node": "8"}
# --patch files, named from the repository's root (the suite runs there; see _at_root)
PATCHES = "tests/unit/golden/platforms"
ROOT = Path(__file__).resolve().parents[2]
LIST_FLAGS = {"env", "volume", "node_selector", "toleration", "image_pull_secret",
              "env_from_secret", "secret_env", "patch", "setup"}


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    """--patch paths are read from the working directory, as on the command line."""
    monkeypatch.chdir(ROOT)

# name -> (target, spec_from_flags keywords); "command"/"module" default to train.py + TRICKY
CASES: dict[str, tuple[str, dict]] = {
    "k8s": ("k8s", dict(GPU2, image=IMAGE, shm_size="16Gi", namespace="ml", infiniband=True,
                        cpus_per_node="32", env=["NCCL_DEBUG=INFO", "GREETING=hi $(HOME) $$"])),
    "k8s-cpu": ("k8s", dict(nnodes="3", nproc_per_node="2", gpus_per_node="0", image=IMAGE,
                            run_id="exp-7", log_dir="/logs", module=True,
                            command=["pkg.train", *TRICKY], run_args="--max-restarts 2")),
    "pytorchjob": ("pytorchjob", dict(GPU2, image=IMAGE, shm_size="16Gi", namespace="ml",
                                      env=["NCCL_DEBUG=INFO"])),
    "pytorchjob-cpu": ("pytorchjob", dict(nnodes="3", nproc_per_node="2", gpus_per_node="0",
                                          image=IMAGE, backoff_limit="2", job_name="cpu-job")),
    "trainjob": ("trainjob", dict(GPU2, image=IMAGE, shm_size="16Gi", infiniband=True,
                                  cpus_per_node="32", env=["NCCL_DEBUG=INFO"])),
    "trainjob-cpu": ("trainjob", dict(nnodes="2", nproc_per_node="2", gpus_per_node="0",
                                      image=IMAGE, log_dir="/logs")),
    "volcano": ("volcano", dict(GPU2, image=IMAGE, namespace="ml", backoff_limit="2",
                                env=["NCCL_DEBUG=INFO"])),
    "slurm": ("slurm", dict(GPU2, cpus_per_node="32", partition="gpu", time="1-00:00:00",
                            account="proj-1", log_dir="/shared/logs",
                            env=["NCCL_DEBUG=INFO", "GREETING=hi $HOME"])),
    "slurm-cpu": ("slurm", dict(nnodes="2", nproc_per_node="2", gpus_per_node="0",
                                cpus_per_node="2", meshrun="python3 -m meshrun",
                                run_id="fixed-1")),
    "docker": ("docker", dict(GPU2, image=IMAGE, master_addr="10.0.0.1", infiniband=True,
                              shm_size="16Gi", log_dir="/data/logs", env=["NCCL_DEBUG=INFO"])),
    "docker-one-node": ("docker", dict(gpus_per_node="8", image=IMAGE)),
    # what a cluster asks beyond the job: volumes, placement, secrets, a patch, set-up lines
    "k8s-cluster": ("k8s", dict(GPU2, image=IMAGE, job_name="big-run", log_dir="/mnt/logs",
                                volume=["pvc:train-logs:/mnt/logs", "host:/datasets:/data:ro",
                                        "secret:hf-credentials:/etc/hf",
                                        "configmap:train-config:/etc/train"],
                                node_selector=["nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"],
                                toleration=["nvidia.com/gpu:NoSchedule",
                                            "dedicated=ml:NoExecute", "spot"],
                                service_account="trainer", image_pull_secret=["regcred"],
                                env_from_secret=["wandb"],
                                secret_env=["HF_TOKEN=hf-credentials:token"],
                                env=["NCCL_DEBUG=INFO"],
                                patch=[f"{PATCHES}/patch-k8s.yaml"])),
    "pytorchjob-cluster": ("pytorchjob", dict(GPU2, image=IMAGE, log_dir="/mnt/logs",
                                              volume=["pvc:train-logs:/mnt/logs"],
                                              node_selector=["pool=gpu"],
                                              toleration=["nvidia.com/gpu:NoSchedule"],
                                              service_account="trainer",
                                              image_pull_secret=["regcred"],
                                              env_from_secret=["wandb"],
                                              secret_env=["HF_TOKEN=hf-credentials:token"])),
    "trainjob-cluster": ("trainjob", dict(GPU2, image=IMAGE, log_dir="/mnt/logs",
                                          shm_size="16Gi",
                                          volume=["pvc:train-logs:/mnt/logs",
                                                  "secret:hf-credentials:/etc/hf"],
                                          node_selector=["pool=gpu"],
                                          toleration=["nvidia.com/gpu:NoSchedule"],
                                          service_account="trainer",
                                          image_pull_secret=["regcred"],
                                          secret_env=["HF_TOKEN=hf-credentials:token"])),
    "volcano-cluster": ("volcano", dict(GPU2, image=IMAGE, log_dir="/mnt/logs",
                                        volume=["pvc:train-logs:/mnt/logs"],
                                        node_selector=["pool=gpu"], toleration=["spot"],
                                        service_account="trainer",
                                        env_from_secret=["wandb"],
                                        patch=[f"{PATCHES}/patch-volcano.yaml"])),
    "slurm-setup": ("slurm", dict(GPU2, log_dir="/shared/logs",
                                  setup=["export HF_HOME=/shared/hf-cache",
                                         "source /dev/null  # e.g. a venv's bin/activate"])),
    "docker-volume": ("docker", dict(GPU2, image=IMAGE, master_addr="10.0.0.1",
                                     log_dir="/data/logs",
                                     volume=["host:/datasets:/data/in:ro"])),
}
SUFFIX = {"slurm": "sbatch", "docker": "sh"}


def spec_of(name: str) -> RenderSpec:
    target, kw = CASES[name]
    kw = dict(kw)
    command = kw.pop("command", ["train.py", *TRICKY])
    return spec_from_flags(target, command, **kw)


def golden_path(name: str) -> Path:
    return GOLDEN / f"{name}.{SUFFIX.get(CASES[name][0], 'yaml')}"


def docs_of(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def require(module: str):
    """Import a validation package, or skip (fail under CI=true, where the test extra has it)."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)(
            f"{module} missing: pip install -e '.[test]'")


# --- golden files and headers ----------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name):
    text = render_platform(spec_of(name))
    shown = text.replace(f"# generated by meshrun {__version__}\n",
                         "# generated by meshrun <VERSION>\n", 1)
    path = golden_path(name)
    if os.environ.get("MESHRUN_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(shown)
    assert path.exists(), f"no golden {path}: run with MESHRUN_UPDATE_GOLDEN=1"
    assert shown == path.read_text()


@pytest.mark.parametrize("name", sorted(CASES))
def test_header_names_the_version_and_a_command_that_gives_the_same_spec(name):
    spec = spec_of(name)
    lines = render_platform(spec).splitlines()
    if lines[0].startswith("#!"):
        lines = lines[1:]
    assert lines[0] == f"# generated by meshrun {__version__}"
    assert lines[1].startswith("# regenerate: meshrun render ")
    words = shlex.split(lines[1][len("# regenerate: "):])
    assert words[:3] == ["meshrun", "render", spec.target]
    assert _spec_from_argv(words[1:]) == spec


def _spec_from_argv(argv: list[str]) -> RenderSpec:
    """Map ``render TARGET --flag value ... -- CMD`` onto spec_from_flags, flag by flag."""
    target, rest = argv[1], argv[2:]
    kw: dict = {name: [] for name in LIST_FLAGS}
    while rest:
        word = rest.pop(0)
        if word == "--":
            return spec_from_flags(target, rest, **kw)
        if word == "-m":
            return spec_from_flags(target, rest, module=True, **kw)
        assert word.startswith("--"), word
        flag, eq, value = word.partition("=")
        name = flag[2:].replace("-", "_")
        if name == "infiniband":
            kw[name] = True
            continue
        value = value if eq else rest.pop(0)
        if name in LIST_FLAGS:
            kw[name].append(value)
        else:
            kw[name] = value
    raise AssertionError("no command in the regenerate line")


def test_renderers_read_no_environment(monkeypatch):
    """The same spec gives the same text whatever the laptop's environment holds."""
    before = {name: render_platform(spec_of(name)) for name in CASES}
    for var, value in {"MESHRUN_NNODES": "9", "SLURM_JOB_ID": "7", "WORLD_SIZE": "5",
                       "NODE_RANK": "3", "HOME": "/elsewhere"}.items():
        monkeypatch.setenv(var, value)
    assert {name: render_platform(spec_of(name)) for name in CASES} == before


def test_render_modules_never_import_torch():
    code = ("import sys, meshrun.render.spec as s\n"
            "for t in s.PLATFORM_TARGETS: __import__(s.RENDERERS[t][0])\n"
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.strip() == "False", done.stderr


# --- Kubernetes schemas ----------------------------------------------------------------------

KUBE_VERSIONS = ("1.27.0", "latest")  # 1.27: the controller-uid label and endPort are GA


def _kube_validate(doc: dict) -> None:
    utils = require("kubernetes_validate.utils")
    for version in KUBE_VERSIONS:
        utils.validate(doc, utils.latest_version() if version == "latest" else version,
                       strict=True)


def _pod_template(template: dict) -> dict:
    """A CRD's embedded pod template as a core v1 PodTemplate, which the schemas cover."""
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "check"},
            "template": template}


@pytest.mark.parametrize("name", ["k8s", "k8s-cpu", "k8s-cluster"])
def test_k8s_objects_pass_strict_schema_validation(name):
    docs = docs_of(render_platform(spec_of(name)))
    assert [d["kind"] for d in docs] == ["Service", "NetworkPolicy", "Job"]
    for doc in docs:
        _kube_validate(doc)


def test_kubernetes_validate_cli_passes_the_rendered_file(tmp_path):
    """The file exactly as written (header comments, '---' separators) through the CLI."""
    require("kubernetes_validate")
    path = tmp_path / "job.yaml"
    path.write_text(render_platform(spec_of("k8s")))
    done = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("passed for resource") == 3 and "WARN" not in done.stdout


def test_strict_validation_rejects_an_unknown_field():
    """The validator above is strict: a misspelt field fails (so a pass means something)."""
    utils = require("kubernetes_validate.utils")
    job = docs_of(render_platform(spec_of("k8s")))[2]
    job["spec"]["template"]["spec"]["containers"][0]["imagePulPolicy"] = "Always"
    with pytest.raises(utils.ValidationError):
        utils.validate(job, "1.27.0", strict=True)


def test_kubernetes_validate_cannot_check_crds():
    """Why the CRD targets are checked with their SDKs' models instead (docs/render.md)."""
    utils = require("kubernetes_validate.utils")
    doc = docs_of(render_platform(spec_of("pytorchjob")))[0]
    with pytest.raises(utils.SchemaNotFoundError):
        utils.validate(doc, "1.27.0", strict=True)


@pytest.mark.slow  # imports the kubernetes client and the Kubeflow training SDK (~2 s)
@pytest.mark.parametrize("name", ["pytorchjob", "pytorchjob-cpu", "pytorchjob-cluster"])
def test_pytorchjob_matches_the_training_sdk_models(name):
    """kubeflow-training's models (the PyTorchJob CRD's OpenAPI types), walked strictly:
    no unknown field, every type right, required fields present (the models' own checks);
    each replica's pod template also passes the core schemas."""
    doc = docs_of(render_platform(spec_of(name)))[0]
    job = _build_openapi(doc, "KubeflowOrgV1PyTorchJob", "PyTorchJob")
    assert job.spec.pytorch_replica_specs["Master"].replicas == 1
    for replica in doc["spec"]["pytorchReplicaSpecs"].values():
        _kube_validate(_pod_template(replica["template"]))


@pytest.mark.slow
def test_the_sdk_walk_rejects_unknown_and_missing_fields():
    doc = docs_of(render_platform(spec_of("pytorchjob")))[0]
    doc["spec"]["nprocsPerNode"] = "8"
    with pytest.raises(AssertionError, match="nprocsPerNode"):
        _build_openapi(doc, "KubeflowOrgV1PyTorchJob", "PyTorchJob")
    doc = docs_of(render_platform(spec_of("pytorchjob")))[0]
    del doc["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["name"]
    with pytest.raises(ValueError, match="name"):
        _build_openapi(doc, "KubeflowOrgV1PyTorchJob", "PyTorchJob")


_OPENAPI_PRIMITIVES = {"str": str, "int": int, "bool": bool, "float": (int, float),
                       "object": object}


def _build_openapi(value, type_name: str, path: str):
    """Construct the SDK model for ``value`` recursively, refusing any key the model lacks."""
    kf_models = require("kubeflow.training.models")
    k8s_models = require("kubernetes.client.models")
    if type_name.startswith("list["):
        assert isinstance(value, list), f"{path}: not a list"
        return [_build_openapi(v, type_name[5:-1], f"{path}[{i}]") for i, v in enumerate(value)]
    m = re.match(r"dict\(([^,]*), (.*)\)$", type_name)
    if m:
        assert isinstance(value, dict), f"{path}: not a mapping"
        return {k: _build_openapi(v, m.group(2), f"{path}.{k}") for k, v in value.items()}
    if type_name in _OPENAPI_PRIMITIVES:
        ok = isinstance(value, _OPENAPI_PRIMITIVES[type_name]) and (
            type_name in ("bool", "object") or not isinstance(value, bool))
        assert ok, f"{path}: {value!r} is not {type_name}"
        return value
    klass = getattr(kf_models, type_name, None) or getattr(k8s_models, type_name)
    assert isinstance(value, dict), f"{path}: {value!r} is not a {type_name}"
    by_json = {json_key: attr for attr, json_key in klass.attribute_map.items()}
    unknown = sorted(set(value) - set(by_json))
    assert not unknown, f"{path}: {type_name} has no field {unknown}"
    return klass(**{by_json[k]: _build_openapi(v, klass.openapi_types[by_json[k]], f"{path}.{k}")
                    for k, v in value.items()})


@pytest.mark.slow  # imports every model of kubeflow-trainer-api (~3 s)
@pytest.mark.parametrize("name", ["trainjob", "trainjob-cpu", "trainjob-cluster"])
def test_trainjob_round_trips_through_the_trainer_api_models(name):
    """kubeflow-trainer-api's pydantic models type-check every field; a key they do not know
    would be dropped, so the round trip must give the document back unchanged."""
    models = require("kubeflow_trainer_api.models")
    doc = docs_of(render_platform(spec_of(name)))[0]
    job = models.TrainerV1alpha1TrainJob.from_dict(doc)
    assert job.to_dict() == doc
    typo = dict(doc, spec=dict(doc["spec"], runtimeRefs=doc["spec"]["runtimeRef"]))
    assert models.TrainerV1alpha1TrainJob.from_dict(typo).to_dict() != typo


VOLCANO_EVENTS = {"*", "PodPending", "PodRunning", "PodFailed", "PodEvicted", "Unknown",
                  "TaskCompleted", "TaskFailed", "OutOfSync", "CommandIssued", "JobUpdated"}
VOLCANO_ACTIONS = {"AbortJob", "RestartJob", "RestartTask", "RestartPod", "TerminateJob",
                   "CompleteJob", "ResumeJob", "SyncJob", "EnqueueJob"}


@pytest.mark.parametrize("name", ["volcano", "volcano-cluster"])
def test_volcano_job_structure(name):
    """No schema for Volcano's CRD ships on PyPI: its fields are checked by hand against
    volcano-sh/apis batch/v1alpha1, and each pod template against the core schemas."""
    spec = spec_of(name)
    (doc,) = docs_of(render_platform(spec))
    assert (doc["apiVersion"], doc["kind"]) == ("batch.volcano.sh/v1alpha1", "Job")
    s = doc["spec"]
    assert set(s) <= {"schedulerName", "minAvailable", "maxRetry", "plugins", "policies",
                      "tasks", "queue"}
    assert s["schedulerName"] == "volcano" and s["minAvailable"] == spec.nnodes
    assert set(s["plugins"]) == {"svc", "env"} and all(
        isinstance(v, list) and all(isinstance(a, str) for a in v) for v in s["plugins"].values())
    for policy in s["policies"]:
        assert set(policy) == {"event", "action"}
        assert policy["event"] in VOLCANO_EVENTS and policy["action"] in VOLCANO_ACTIONS
    assert sum(t["replicas"] for t in s["tasks"]) == spec.nnodes
    for task in s["tasks"]:
        assert set(task) == {"name", "replicas", "template"}
        _kube_validate(_pod_template(task["template"]))


# --- what each node would see, read by the real planner ------------------------------------

def kube_expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion (k8s third_party/forked/golang/expansion)."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end >= 0:
                    name = text[i + 2:end]
                    out.append(env.get(name, f"$({name})"))
                    i = end + 1
                    continue
                out.append("$(")
                i += 2
                continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def container_env(container: dict, fields: dict[str, str], base: dict[str, str]) -> dict:
    """A container's env as the kubelet resolves it: values expanded, fieldRefs looked up."""
    env = dict(base)
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = kube_expand(var["value"], env)
        elif "secretKeyRef" in var["valueFrom"]:   # the cluster's Secret: a stand-in value
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = f"<secret {ref['name']}/{ref['key']}>"
        else:
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            assert path in fields, f"fieldRef {path} is not a field this pod has"
            env[var["name"]] = fields[path]
    return env


def container_argv(container: dict, env: dict[str, str]) -> list[str]:
    return [kube_expand(w, env) for w in container.get("command", []) + container.get("args", [])]


UID = "6c2f0a4e-3b1d-4c55-9a0e-1f2d3c4b5a69"


def pods_k8s(spec: RenderSpec, text: str):
    service, policy, job = docs_of(text)
    template = job["spec"]["template"]
    pod = template["spec"]
    # node 0's address is <pod host name>.<subdomain>, served by the headless Service
    assert pod["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= \
        template["metadata"]["labels"].items()
    assert job["spec"]["completions"] == job["spec"]["parallelism"]
    for i in range(job["spec"]["completions"]):
        labels = {**template["metadata"]["labels"], "batch.kubernetes.io/controller-uid": UID,
                  "batch.kubernetes.io/job-completion-index": str(i)}
        fields = {f"metadata.labels['{k}']": v for k, v in labels.items()}
        env = container_env(pod["containers"][0], fields, {"JOB_COMPLETION_INDEX": str(i)})
        yield env, f"{job['metadata']['name']}-{i}", container_argv(pod["containers"][0], env)


def pods_pytorchjob(spec: RenderSpec, text: str):
    """The training operator's envvar.go (v1.7+): master/worker env per pod."""
    (doc,) = docs_of(text)
    name, js = doc["metadata"]["name"], doc["spec"]
    replicas = js["pytorchReplicaSpecs"]
    total = sum(r["replicas"] for r in replicas.values())
    nproc = js.get("nprocPerNode", "auto")
    master_c = replicas["Master"]["template"]["spec"]["containers"][0]
    assert master_c["name"] == "pytorch"
    port = next(p["containerPort"] for p in master_c.get("ports", [])
                if p["name"] == "pytorchjob-port")
    for rtype in ("Master", "Worker"):
        for index in range(replicas.get(rtype, {}).get("replicas", 0)):
            rank = index + (1 if rtype == "Worker" else 0)
            container = replicas[rtype]["template"]["spec"]["containers"][0]
            env = container_env(container, {}, {})
            env.update({"PYTHONUNBUFFERED": "0", "MASTER_PORT": str(port),
                        "PET_MASTER_PORT": str(port), "MASTER_ADDR": f"{name}-master-0",
                        "PET_MASTER_ADDR": f"{name}-master-0",
                        "WORLD_SIZE": str(total * (int(nproc) if nproc.isdigit() else 1)),
                        "RANK": str(rank), "PET_NPROC_PER_NODE": nproc,
                        "PET_NODE_RANK": str(rank), "PET_NNODES": str(total)})
            yield env, f"{name}-{rtype.lower()}-{index}", container_argv(container, env)


def pods_trainjob(spec: RenderSpec, text: str):
    """Kubeflow Trainer's torch plugin (torch.go): PET_* only, node rank = completion index."""
    (doc,) = docs_of(text)
    name, trainer = doc["metadata"]["name"], doc["spec"]["trainer"]
    assert doc["spec"]["runtimeRef"]["name"] == "torch-distributed"
    for i in range(trainer["numNodes"]):
        env = container_env(trainer, {}, {"JOB_COMPLETION_INDEX": str(i)})
        env.update({"PET_NNODES": str(trainer["numNodes"]),
                    "PET_NPROC_PER_NODE": str(trainer.get("numProcPerNode", "auto")),
                    "PET_NODE_RANK": str(i), "PET_MASTER_ADDR": f"{name}-node-0-0.{name}",
                    "PET_MASTER_PORT": "29500"})
        yield env, f"{name}-node-0-{i}", container_argv(trainer, env)


def pods_volcano(spec: RenderSpec, text: str):
    """Volcano's svc plugin (VC_<TASK>_NUM/_HOSTS) and env plugin (VC_TASK_INDEX)."""
    (doc,) = docs_of(text)
    name, tasks = doc["metadata"]["name"], doc["spec"]["tasks"]
    assert "svc" in doc["spec"]["plugins"] and "env" in doc["spec"]["plugins"]
    shared = {}
    for task in tasks:
        key = task["name"].replace("-", "_").upper()
        shared[f"VC_{key}_NUM"] = str(task["replicas"])
        shared[f"VC_{key}_HOSTS"] = ",".join(f"{name}-{task['name']}-{j}.{name}"
                                             for j in range(task["replicas"]))
    for task in tasks:
        container = task["template"]["spec"]["containers"][0]
        for i in range(task["replicas"]):
            host = f"{name}-{task['name']}-{i}"
            env = container_env(container, {}, dict(shared, HOSTNAME=host))
            env.update({"VC_TASK_INDEX": str(i), "VK_TASK_INDEX": str(i)})
            yield env, host, container_argv(container, env)


def _fake_tool(folder: Path, name: str) -> None:
    """An executable that records its argv (NUL-separated) and its environment."""
    exe = folder / name
    exe.write_text('#!/bin/sh\nprintf \'%s\\0\' "$@" > "$FAKE_OUT.argv"\n'
                   'env -0 > "$FAKE_OUT.env"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)


def _run_script(tmp_path: Path, text: str, tool: str, shell: str, **env: str):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    _fake_tool(bin_dir, tool)
    script = tmp_path / "job"
    script.write_text(text)
    out = tmp_path / "captured"
    clean = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_OUT": str(out), "HOME": "/home/u", **env}
    done = subprocess.run([shell, str(script)], env=clean, capture_output=True, text=True,
                          timeout=30)
    if done.returncode:
        return done, None, None
    argv = out.with_suffix(".argv").read_bytes().split(b"\0")[:-1]
    seen = dict(line.split("=", 1) for line in
                out.with_suffix(".env").read_bytes().decode().split("\0") if "=" in line)
    return done, [a.decode() for a in argv], seen


def pods_slurm(spec: RenderSpec, text: str, tmp_path: Path):
    """bash runs the script with a stand-in srun; each task then gets SLURM's step variables."""
    sbatch = dict(re.findall(r"^#SBATCH --([a-z-]+)=(\S+)$", text, re.M))
    nodes = int(sbatch["nodes"])
    assert sbatch["ntasks-per-node"] == "1"
    done, argv, seen = _run_script(tmp_path, text, "srun", "bash")
    assert done.returncode == 0, done.stderr
    assert argv[:2] == ["--kill-on-bad-exit=1", f"--cpus-per-task={sbatch['cpus-per-task']}"]
    argv = argv[1:]                      # the step's options: what srun takes, not meshrun
    exported = {k: v for k, v in seen.items() if k not in ("PATH", "FAKE_OUT", "HOME", "PWD",
                                                           "SHLVL", "_", "OLDPWD")}
    for i in range(nodes):
        env = dict(exported, SLURM_JOB_ID="4242", SLURM_STEP_ID="0", SLURM_NNODES=str(nodes),
                   SLURM_STEP_NUM_NODES=str(nodes), SLURM_NODEID=str(i),
                   SLURM_JOB_NODELIST=f"gpu[01-{nodes:02d}]",
                   SLURM_STEP_NODELIST=f"gpu[01-{nodes:02d}]",
                   SLURM_STEP_TASKS_PER_NODE=f"1(x{nodes})")
        if "gpus-per-node" in sbatch:
            count = int(sbatch["gpus-per-node"])
            env.update(SLURM_GPUS_ON_NODE=str(count),
                       CUDA_VISIBLE_DEVICES=",".join(map(str, range(count))))
        yield env, f"gpu{i + 1:02d}", argv[1:]


def pods_docker(spec: RenderSpec, text: str, tmp_path: Path):
    """sh runs the script on each node with NODE_RANK set and a stand-in docker."""
    for i in range(spec.nnodes):
        rank = {"NODE_RANK": str(i)} if spec.nnodes > 1 else {}
        done, argv, _ = _run_script(tmp_path, text, "docker", "sh", **rank)
        assert done.returncode == 0, done.stderr
        assert argv[:2] == ["run", "--rm"]
        env, words = {}, argv[2:]
        while words[0].startswith("-"):
            option = words.pop(0)
            if option in ("-e", "--gpus", "--ulimit", "-v"):
                value = words.pop(0)
                if option == "-e":
                    env.update([value.split("=", 1)])
        assert words[0] == spec.image
        yield env, f"node{i}", words[1:]


PODS = {"k8s": pods_k8s, "pytorchjob": pods_pytorchjob, "trainjob": pods_trainjob,
        "volcano": pods_volcano}
EXPECT = {  # target -> (master address, port, run id) for job "train", or a check
    "k8s": lambda s: (f"{s.job_name}-0.{s.job_name}", s.master_port, s.run_id or UID),
    "pytorchjob": lambda s: (f"{s.job_name}-master-0", s.master_port,
                             f"pytorchjob-{s.job_name}"),
    "trainjob": lambda s: (f"{s.job_name}-node-0-0.{s.job_name}", 29500,
                           s.run_id or f"trainjob-{s.job_name}"),
    "volcano": lambda s: (f"{s.job_name}-node-0.{s.job_name}", s.master_port, None),
    "slurm": lambda s: ("gpu01", 15000 + 4242, s.run_id or "slurm-4242.0"),
    "docker": lambda s: (s.master_addr or "127.0.0.1", s.master_port if s.nnodes > 1 else 0,
                         None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_node_plans_its_place_from_what_the_file_gives_it(name, tmp_path):
    """Build each node's environment and command line as the platform would, from the
    rendered text, and run meshrun's real CLI parser and planner on it."""
    spec = spec_of(name)
    text = render_platform(spec)
    if spec.target in PODS:
        pods = list(PODS[spec.target](spec, text))
    else:
        pods = list({"slurm": pods_slurm, "docker": pods_docker}[spec.target](
            spec, text, tmp_path))
    assert len(pods) == spec.nnodes
    master, port, run_id = EXPECT[spec.target](spec)
    plans = []
    for env, host, argv in pods:
        assert argv[:len(spec.meshrun)] == list(spec.meshrun)
        options, command, is_module = split_command(argv[len(spec.meshrun):])
        args = build_parser().parse_args(options)
        assert args.verb == "run"
        facts = HostFacts(hostname=host, gpus=gpus(spec.gpus_per_node))
        cmd = Command(target=command[0], args=tuple(command[1:]), module=is_module)
        plans.append(make_plan(env, flags_from(args), facts, cmd))
    for index, plan in enumerate(plans):
        assert (plan.nnodes, plan.node_rank) == (spec.nnodes, index), plan.source
        assert plan.nproc_per_node == spec.nproc_per_node, plan.source
        assert plan.world_size == spec.nnodes * spec.nproc_per_node
        assert plan.backend == ("nccl" if spec.gpus_per_node else "gloo")
        assert (plan.master_addr, plan.master_port) == (master, port), plan.source
        assert plan.command.argv() == list(spec.command)   # every word arrived intact
        if spec.log_dir:
            assert plan.log_dir == f"{spec.log_dir}/{plan.run_id}"
        env = dict(pods[index][0])
        for var, value in spec.env:
            assert env[var] == value                         # --env values arrive intact
    assert len({p.run_id for p in plans}) == 1               # one run id, no coordination
    if run_id:
        assert plans[0].run_id == run_id


def test_docker_without_node_rank_stops_before_docker_runs(tmp_path):
    done, argv, _ = _run_script(tmp_path, render_platform(spec_of("docker")), "docker", "sh")
    assert done.returncode != 0 and argv is None
    assert "set NODE_RANK to this node index, 0 to 1" in done.stderr


def test_kube_escape_survives_the_kubelet():
    from meshrun.render.spec import kube_escape
    env = {"A": "x"}
    for text in ["$5", "$(A)", "$$(A)", "$$", "a$", "$(", "$(A", "plain", "$$$(A)$"]:
        assert kube_expand(kube_escape(text), env) == text
    assert kube_expand("$(A)", env) == "x"   # the expansion being guarded against


# --- bad input: one line naming the flag, with the fix -------------------------------------

CMD = ["train.py"]
BAD = [
    ("unknown-target", "k9s", {}, "meshrun render"),
    ("no-command", "k8s", dict(image=IMAGE, command=[]), "meshrun render"),
    ("job-name-not-dns", "k8s", dict(image=IMAGE, job_name="Train_1"), "--job-name"),
    ("job-name-too-long-for-pod-names", "volcano",
     dict(image=IMAGE, nnodes="100", job_name="a" * 56), "--job-name"),
    ("job-name-underivable", "k8s", dict(image=IMAGE, command=["123.py"]), "--job-name"),
    ("nnodes-zero", "k8s", dict(image=IMAGE, nnodes="0"), "--nnodes"),
    ("nnodes-not-a-number", "slurm", dict(nnodes="two"), "--nnodes"),
    ("more-processes-than-gpus", "k8s", dict(image=IMAGE, gpus_per_node="8",
                                             nproc_per_node="16"), "--nproc-per-node"),
    ("gpus-negative", "slurm", dict(gpus_per_node="-1"), "--gpus-per-node"),
    ("no-image", "k8s", {}, "--image"),
    ("no-image-docker", "docker", {}, "--image"),
    ("image-for-slurm", "slurm", dict(image=IMAGE), "--image"),
    ("docker-nodes-without-master", "docker", dict(image=IMAGE, nnodes="2"), "--master-addr"),
    ("master-addr-for-k8s", "k8s", dict(image=IMAGE, master_addr="10.0.0.1"), "--master-addr"),
    ("master-addr-not-a-host", "docker", dict(image=IMAGE, nnodes="2",
                                              master_addr="tcp://h:1"), "--master-addr"),
    ("port-out-of-range", "k8s", dict(image=IMAGE, master_port="70000"), "--master-port"),
    ("port-for-slurm", "slurm", dict(master_port="1234"), "--master-port"),
    ("port-for-trainjob", "trainjob", dict(image=IMAGE, master_port="1234"), "--master-port"),
    ("backoff-for-trainjob", "trainjob", dict(image=IMAGE, backoff_limit="1"),
     "--backoff-limit"),
    ("node-rank", "k8s", dict(image=IMAGE, node_rank="1"), "--node-rank"),
    ("env-without-equals", "k8s", dict(image=IMAGE, env=["FOO"]), "--env"),
    ("env-bad-name", "k8s", dict(image=IMAGE, env=["1X=a"]), "--env"),
    ("env-platform-variable", "k8s", dict(image=IMAGE, env=["WORLD_SIZE=2"]), "--env"),
    ("env-flag-variable", "slurm", dict(env=["MESHRUN_NNODES=2"]), "--nnodes"),
    ("env-twice", "slurm", dict(env=["A=1", "A=2"]), "--env"),
    ("newline-in-argument", "slurm", dict(command=["train.py", "a\nb"]), "meshrun render"),
    ("shm-size-unit", "k8s", dict(image=IMAGE, shm_size="16GB"), "--shm-size"),
    ("shm-size-zero", "docker", dict(image=IMAGE, shm_size="0"), "--shm-size"),
    ("shm-size-for-slurm", "slurm", dict(shm_size="1Gi"), "--shm-size"),
    ("namespace-not-dns", "k8s", dict(image=IMAGE, namespace="ML"), "--namespace"),
    ("namespace-for-slurm", "slurm", dict(namespace="ml"), "--namespace"),
    ("partition-for-k8s", "k8s", dict(image=IMAGE, partition="gpu"), "--partition"),
    ("time-with-space", "slurm", dict(time="1 day"), "--time"),
    ("node-flag-in-run-args", "k8s", dict(image=IMAGE, run_args="--nnodes 4"), "--nnodes"),
    ("run-args-unbalanced-quote", "k8s", dict(image=IMAGE, run_args="--config 'a"),
     "--run-args"),
    ("run-id-bad", "k8s", dict(image=IMAGE, run_id="-x"), "--run-id"),
    ("command-starts-with-option", "slurm", dict(command=["--lr", "1"]), "meshrun render"),
    # the cluster options
    ("volume-two-parts", "k8s", dict(image=IMAGE, volume=["pvc:/mnt"]), "--volume"),
    ("volume-unknown-kind", "k8s", dict(image=IMAGE, volume=["nfs:srv:/mnt"]), "--volume"),
    ("volume-relative-mount", "k8s", dict(image=IMAGE, volume=["pvc:logs:mnt"]), "--volume"),
    ("volume-over-shm", "k8s", dict(image=IMAGE, volume=["pvc:logs:/dev/shm"]), "--volume"),
    ("volume-twice-at-one-path", "k8s", dict(image=IMAGE, volume=["pvc:a:/m", "pvc:b:/m/"]),
     "--volume"),
    ("volume-claim-not-a-name", "k8s", dict(image=IMAGE, volume=["pvc:Logs_1:/m"]),
     "--volume"),
    ("volume-host-relative", "k8s", dict(image=IMAGE, volume=["host:data:/data"]), "--volume"),
    ("volume-for-slurm", "slurm", dict(volume=["host:/a:/a"]), "--volume"),
    ("volume-pvc-for-docker", "docker", dict(image=IMAGE, volume=["pvc:a:/a"]), "--volume"),
    ("selector-without-equals", "k8s", dict(image=IMAGE, node_selector=["gpu"]),
     "--node-selector"),
    ("selector-bad-value", "k8s", dict(image=IMAGE, node_selector=["a=b c"]), "--node-selector"),
    ("selector-twice", "k8s", dict(image=IMAGE, node_selector=["a=1", "a=2"]),
     "--node-selector"),
    ("selector-for-docker", "docker", dict(image=IMAGE, node_selector=["a=1"]),
     "--node-selector"),
    ("toleration-bad-effect", "k8s", dict(image=IMAGE, toleration=["a:NoRun"]), "--toleration"),
    ("toleration-bad-key", "k8s", dict(image=IMAGE, toleration=["a b"]), "--toleration"),
    ("service-account-bad", "k8s", dict(image=IMAGE, service_account="Trainer"),
     "--service-account"),
    ("service-account-for-slurm", "slurm", dict(service_account="t"), "--service-account"),
    ("pull-secret-bad", "k8s", dict(image=IMAGE, image_pull_secret=["a_b"]),
     "--image-pull-secret"),
    ("env-from-secret-for-trainjob", "trainjob", dict(image=IMAGE, env_from_secret=["w"]),
     "--env-from-secret"),
    ("secret-env-shape", "k8s", dict(image=IMAGE, secret_env=["HF_TOKEN=hf"]), "--secret-env"),
    ("secret-env-also-env", "k8s", dict(image=IMAGE, env=["A=1"], secret_env=["A=s:k"]),
     "--secret-env"),
    ("secret-env-platform-var", "k8s", dict(image=IMAGE, secret_env=["RANK=s:k"]),
     "--secret-env"),
    ("secret-env-bad-key", "k8s", dict(image=IMAGE, secret_env=["A=s:k/y"]), "--secret-env"),
    ("secret-env-dot-key", "k8s", dict(image=IMAGE, secret_env=["A=s:.."]), "--secret-env"),
    ("secret-env-twice", "k8s", dict(image=IMAGE, secret_env=["A=s:k", "A=t:k"]),
     "--secret-env"),
    ("patch-missing", "k8s", dict(image=IMAGE, patch=["no/such/patch.yaml"]), "--patch"),
    ("patch-a-folder", "k8s", dict(image=IMAGE, patch=["tests"]), "--patch"),
    ("patch-not-yaml", "k8s", dict(image=IMAGE, patch=["README.md"]), "--patch"),
    ("patch-for-slurm", "slurm", dict(patch=[f"{PATCHES}/patch-volcano.yaml"]), "--patch"),
    ("setup-for-k8s", "k8s", dict(image=IMAGE, setup=["module load cuda"]), "--setup"),
    ("setup-two-lines", "slurm", dict(setup=["module load cuda\nrm -rf ~"]), "--setup"),
]


@pytest.mark.parametrize("target,kw,flag", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_naming_the_flag(target, kw, flag):
    kw = dict(kw)
    command = kw.pop("command", CMD)
    with pytest.raises(UsageError) as info:
        spec_from_flags(target, command, **kw)
    err = info.value
    line = err.line()
    assert err.exit_code == EXIT_USAGE and "\n" not in line
    assert line.startswith("meshrun: error: ") and "; fix: " in line
    assert flag in line or flag == err.subject


def test_a_spec_built_in_code_is_validated_too():
    with pytest.raises(UsageError, match="--nproc-per-node"):
        RenderSpec(target="slurm", job_name="t", command=("t.py",), gpus_per_node=2,
                   nproc_per_node=4)
    spec = spec_of("slurm-cpu")
    with pytest.raises(UsageError, match="--image"):
        dataclasses.replace(spec, image=IMAGE)
    assert set(PLATFORM_TARGETS) == {c[0] for c in CASES.values()}


# --- the cluster options' behaviour ------------------------------------------------------------

def test_a_patch_merges_named_lists_by_name_replaces_others_and_null_removes():
    from meshrun.render.cluster import merge

    base = {"containers": [{"name": "train", "image": "a", "env": [{"name": "A", "value": "1"}]}],
            "args": ["x", "y"], "keep": 1, "drop": 2}
    patch = {"containers": [{"name": "train", "env": [{"name": "B", "value": "2"}]},
                            {"name": "sidecar", "image": "s"}],
             "args": ["z"], "drop": None}
    assert merge(base, patch) == {
        "containers": [{"name": "train", "image": "a",
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                       {"name": "sidecar", "image": "s"}],
        "args": ["z"], "keep": 1}
    assert base["containers"][0]["env"] == [{"name": "A", "value": "1"}]   # inputs unchanged
    # volumeMounts merge by mountPath, as Kubernetes merges them (not by the volume's name)
    mounted = {"volumeMounts": [{"name": "vol-0", "mountPath": "/mnt/logs"}]}
    assert merge(mounted, {"volumeMounts": [{"name": "vol-0", "mountPath": "/cfg",
                                             "subPath": "c"}]})["volumeMounts"] == [
        {"name": "vol-0", "mountPath": "/mnt/logs"},
        {"name": "vol-0", "mountPath": "/cfg", "subPath": "c"}]
    # an item of a keyed list without its key would replace meshrun's list without a word
    with pytest.raises(UsageError, match="an item of containers has no name"):
        merge(base, {"containers": [{"imagePullPolicy": "Always"}]})


def test_the_patch_reaches_the_object_it_names_and_a_patch_that_names_none_is_refused(tmp_path):
    docs = docs_of(render_platform(spec_of("k8s-cluster")))
    service, policy, job = docs
    pod = job["spec"]["template"]["spec"]
    assert job["spec"]["activeDeadlineSeconds"] == 86400
    assert pod["priorityClassName"] == "training-high"
    train = pod["containers"][0]
    assert train["imagePullPolicy"] == "Always" and train["image"] == IMAGE   # merged, not replaced
    env = {e["name"]: e.get("value") for e in train["env"]}
    assert env["TORCH_SHOW_CPP_STACKTRACES"] == "1" and env["MESHRUN_NNODES"] == "2"  # added
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert "activeDeadlineSeconds" not in service.get("spec", {})
    wrong = tmp_path / "p.yaml"
    wrong.write_text("kind: Job\nmetadata:\n  name: other\nspec:\n  suspend: true\n")
    spec = spec_from_flags("k8s", CMD, image=IMAGE, patch=[str(wrong)])
    with pytest.raises(UsageError, match="no Job other in this file"):
        render_platform(spec)


def test_every_volume_is_mounted_where_asked_and_secrets_are_read_only():
    job = docs_of(render_platform(spec_of("k8s-cluster")))[2]
    pod = job["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert set(mounts) == {"/dev/shm", "/mnt/logs", "/data", "/etc/hf", "/etc/train"}
    assert volumes[mounts["/mnt/logs"]["name"]]["persistentVolumeClaim"] == {
        "claimName": "train-logs"}
    assert "readOnly" not in mounts["/mnt/logs"]
    assert volumes[mounts["/data"]["name"]]["hostPath"]["path"] == "/datasets"
    assert all(mounts[p]["readOnly"] for p in ("/data", "/etc/hf", "/etc/train"))
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pod["tolerations"][2] == {"key": "spot", "operator": "Exists"}
    assert pod["serviceAccountName"] == "trainer"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    train = pod["containers"][0]
    assert train["envFrom"] == [{"secretRef": {"name": "wandb"}}]
    token, = [e for e in train["env"] if e["name"] == "HF_TOKEN"]
    assert token["valueFrom"] == {"secretKeyRef": {"name": "hf-credentials", "key": "token"}}


def test_a_log_folder_on_no_volume_is_said_and_one_on_a_volume_is_not():
    bare = spec_from_flags("k8s", CMD, image=IMAGE, log_dir="/mnt/logs")
    assert any("log folder (/mnt/logs) is on no volume" in n and "--volume pvc:" in n
               for n in bare.notes)
    assert any("log folder (./logs)" in n for n in spec_from_flags("volcano", CMD,
                                                                   image=IMAGE).notes)
    kept = spec_of("k8s-cluster")
    assert not any("log folder" in n for n in kept.notes)
    read_only = spec_from_flags("k8s", CMD, image=IMAGE, log_dir="/mnt/logs/run",
                                volume=["pvc:logs:/mnt/logs:ro"])
    assert any("log folder" in n for n in read_only.notes)      # a read-only volume keeps none
    assert not any("log folder" in n for n in spec_of("docker").notes)   # docker mounts it
    assert not any("log folder" in n for n in spec_of("slurm").notes)    # a shared file system


@pytest.mark.parametrize("gpus,nproc,cpus", [("8", "8", 32), ("0", "2", 2), ("4", "2", 8)])
def test_slurm_asks_for_cpus_per_task_unless_told_and_says_so(gpus, nproc, cpus):
    spec = spec_from_flags("slurm", CMD, nnodes="2", gpus_per_node=gpus, nproc_per_node=nproc)
    text = render_platform(spec)
    assert f"#SBATCH --cpus-per-task={cpus}\n" in text
    assert any(f"asks SLURM for {cpus} CPUs" in n for n in spec.notes)
    told = spec_from_flags("slurm", CMD, gpus_per_node=gpus, nproc_per_node=nproc,
                           cpus_per_node="3")
    assert "#SBATCH --cpus-per-task=3\n" in render_platform(told)
    assert not any("CPUs" in n for n in told.notes)


def test_slurm_setup_lines_run_before_srun_and_a_failing_one_stops_the_script(tmp_path):
    spec = spec_from_flags("slurm", CMD, setup=["export FROM_SETUP=yes", "cd /"])
    done, argv, seen = _run_script(tmp_path, render_platform(spec), "srun", "bash")
    assert done.returncode == 0, done.stderr
    assert seen["FROM_SETUP"] == "yes" and seen["PWD"] == "/"
    failing = spec_from_flags("slurm", CMD, setup=["false"])
    elsewhere = tmp_path / "failing"
    elsewhere.mkdir()
    done, _, _ = _run_script(elsewhere, render_platform(failing), "srun", "bash")
    assert done.returncode != 0
    assert not (elsewhere / "captured.argv").exists()        # srun was never reached


def test_the_cli_takes_repeated_cluster_flags_and_refuses_them_for_config_targets(tmp_path,
                                                                                 capsys):
    from meshrun.cli import main

    code = main(["render", "k8s", "--image", IMAGE, "--volume", "pvc:a:/a", "--volume",
                 "pvc:b:/b", "--toleration", "x", "--", "train.py"])
    out = capsys.readouterr().out
    assert code == 0
    job = docs_of(out)[2]
    assert [m["mountPath"] for m in job["spec"]["template"]["spec"]["containers"][0][
        "volumeMounts"]] == ["/dev/shm", "/a", "/b"]
    assert main(["render", "accelerate", "--volume", "pvc:a:/a", "--", "train.py"]) == 2
    err = capsys.readouterr().err
    assert "--volume is for submission files, not accelerate" in err and \
        "[render-flag-not-applicable]" in err


def test_docker_mounts_a_log_folder_inside_a_volume_once():
    """Two mounts at one path stop docker ("Duplicate mount point")."""
    spec = spec_from_flags("docker", CMD, image=IMAGE, log_dir="/data/logs",
                           volume=["host:/srv/data:/data"])
    line = render_platform(spec)
    assert "-v /srv/data:/data" in line and "/data/logs:/data/logs" not in line
    alone = render_platform(spec_from_flags("docker", CMD, image=IMAGE, log_dir="/data/logs"))
    assert "-v /data/logs:/data/logs" in alone


def test_a_patch_that_is_a_fifo_is_refused_before_it_is_opened(tmp_path):
    """Opening a FIFO blocks until a writer comes: it must never be opened."""
    fifo = tmp_path / "patch.yaml"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a regular file") as info:
        spec_from_flags("k8s", CMD, image=IMAGE, patch=[str(fifo)])
    assert info.value.code == "render-bad-patch"


# --- the job token (issue 21, docs/security.md) -------------------------------------------

TOKEN = "t0k3n-" + "x" * 37


@pytest.mark.parametrize("target", ["k8s", "pytorchjob", "trainjob", "volcano"])
def test_a_kubernetes_file_gives_every_pod_the_token_from_one_secret(target):
    kw = {"image": IMAGE}
    spec = spec_from_flags(target, CMD, nnodes="3", job_token=TOKEN, **kw)
    docs = docs_of(render_platform(spec))
    secret = docs[0]
    assert (secret["kind"], secret["metadata"]["name"], secret["stringData"]) == \
        ("Secret", f"{spec.job_name}-token", {"token": TOKEN})
    refs = re.findall(r"'name': 'MESHRUN_JOB_TOKEN', 'valueFrom': \{'secretKeyRef': "
                      r"\{'name': '([^']+)', 'key': 'token'\}\}", repr(docs[1:]))
    assert refs and set(refs) == {spec.token_secret}, repr(docs[1:])[:2000]
    assert TOKEN not in repr(docs[1:])                 # only the Secret holds it
    if target == "k8s":
        for doc in docs:
            _kube_validate(doc)
    single = docs_of(render_platform(spec_from_flags(target, CMD, job_token=TOKEN, **kw)))
    assert "Secret" not in [d["kind"] for d in single]  # one node: no control plane to sign


def test_slurm_draws_the_token_in_the_batch_shell_and_docker_reads_it(tmp_path):
    slurm = render_platform(spec_from_flags("slurm", CMD, nnodes="2", job_token=TOKEN))
    assert TOKEN not in slurm and "MESHRUN_JOB_TOKEN" in slurm
    (tmp_path / "a").mkdir()
    done, _, seen = _run_script(tmp_path / "a", slurm, "srun", "bash")
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"[0-9a-f]{64}", seen["MESHRUN_JOB_TOKEN"]), seen["MESHRUN_JOB_TOKEN"]
    (tmp_path / "b").mkdir()
    _, _, again = _run_script(tmp_path / "b", slurm, "srun", "bash")
    assert again["MESHRUN_JOB_TOKEN"] != seen["MESHRUN_JOB_TOKEN"]    # a new one each job
    (tmp_path / "c").mkdir()
    _, _, kept = _run_script(tmp_path / "c", slurm, "srun", "bash", MESHRUN_JOB_TOKEN=TOKEN)
    assert kept["MESHRUN_JOB_TOKEN"] == TOKEN                          # one exported is kept
    docker = render_platform(spec_from_flags("docker", CMD, nnodes="2", image=IMAGE,
                                             master_addr="n0", job_token=TOKEN))
    assert TOKEN not in docker
    (tmp_path / "d").mkdir()
    done, argv, _ = _run_script(tmp_path / "d", docker, "docker", "sh", NODE_RANK="1")
    assert done.returncode != 0 and "set MESHRUN_JOB_TOKEN to the job token" in done.stderr
    (tmp_path / "e").mkdir()
    done, argv, seen = _run_script(tmp_path / "e", docker, "docker", "sh", NODE_RANK="1",
                                   MESHRUN_JOB_TOKEN=TOKEN)
    assert done.returncode == 0 and "MESHRUN_JOB_TOKEN" in argv and TOKEN not in argv
    assert seen["MESHRUN_JOB_TOKEN"] == TOKEN          # what `docker -e NAME` hands on
    plain = render_platform(spec_from_flags("slurm", CMD, nnodes="2"))
    assert "MESHRUN_JOB_TOKEN" not in plain


def test_the_cli_draws_a_token_writes_the_file_private_and_no_token_leaves_it_out(
        tmp_path, capsys):
    from meshrun.cli import main

    out = tmp_path / "job.yaml"
    assert main(["render", "k8s", "--nnodes", "2", "--image", IMAGE, "-o", str(out),
                 "--", "train.py"]) == 0
    err = capsys.readouterr().err
    assert "the file holds a job token drawn now (Secret train-token)" in err
    assert stat.S_IMODE(out.stat().st_mode) & 0o077 == 0
    first = docs_of(out.read_text())[0]["stringData"]["token"]
    assert len(first) >= 40 and first not in err
    again = tmp_path / "again.yaml"
    main(["render", "k8s", "--nnodes", "2", "--image", IMAGE, "-o", str(again), "--",
          "train.py"])
    assert docs_of(again.read_text())[0]["stringData"]["token"] != first   # drawn per render
    capsys.readouterr()
    assert main(["render", "k8s", "--nnodes", "2", "--image", IMAGE, "--no-token", "--",
                 "train.py"]) == 0
    captured = capsys.readouterr()
    assert "MESHRUN_JOB_TOKEN" not in captured.out and "job token" not in captured.err
    assert main(["render", "slurm", "--nnodes", "2", "--", "train.py"]) == 0
    captured = capsys.readouterr()
    assert "MESHRUN_JOB_TOKEN" in captured.out and "job token drawn now" not in captured.err

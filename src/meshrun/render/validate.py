"""The rules a :class:`~meshrun.render.spec.RenderSpec` must keep (checked when one is made,
from flags or in code): counts, names a platform accepts, the command, ``--env`` names (no
platform variable, no node flag's variable: derived from the topology), and each target's
own limits. Each broken rule is one line naming the flag, with the fix; exit 2."""

from __future__ import annotations

import re
from dataclasses import fields

from ..plan.model import RUN_ID
from ..topology import CONTEXT_VARIABLES, Flags, platform_variable
from .cluster import validate_cluster
from .spec import (
    _QUANTITY,
    CONTAINER_TARGETS,
    DEFAULT_MASTER_PORT,
    KUBE_TARGETS,
    PLATFORM_TARGETS,
    TRAINJOB_MASTER_PORT,
    RenderSpec,
    _fail,
)

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOST = re.compile(r"^[A-Za-z0-9_.-]+$|^[0-9A-Fa-f:]+$")
_SLURM_WORD = re.compile(r"^[A-Za-z0-9_.,:+-]+$")

# The node flags and their variables, as the topology's Flags declares them: "file" ones are
# written by the file from render's own flag, "platform" ones come from the platform; neither
# may be a run flag or an --env variable. "run" ones (--join-timeout ...) go to every node's
# `meshrun run`.
_SUPPLIED = {f.name: f.metadata["render"] for f in fields(Flags) if f.metadata["render"] != "run"}
_NODE_FLAGS = tuple(Flags.flag_name(name) for name in _SUPPLIED)
_FLAG_VARS = {Flags.env_name(name): Flags.flag_name(name) if how == "file" else "(the platform)"
              for name, how in _SUPPLIED.items()}
# The platform assigns each node's devices.
_DEVICE_VARS = ("CUDA_VISIBLE_DEVICES",)


def validate(spec: RenderSpec) -> None:
    """Raise one :class:`~meshrun.errors.UsageError` line for the first rule ``spec`` breaks."""
    t = spec.target
    if t not in PLATFORM_TARGETS:
        _fail(f"unknown platform target {t!r}", "meshrun render",
              f"use one of: {', '.join(PLATFORM_TARGETS)}", code="unknown-render-target")
    for f in fields(spec):
        if f.name == "patches":   # YAML files: their text is many lines by nature
            continue
        value = getattr(spec, f.name)
        words = value if isinstance(value, tuple) else (value,)
        for word in words:
            for text in (word if isinstance(word, tuple) else (word,)):
                if isinstance(text, str) and any(ord(c) < 32 or ord(c) == 127 for c in text):
                    _fail(f"{_flag(f.name)} value {text!r} holds a control character (newline, "
                          "tab, ...), which no submission file can carry safely",
                          _flag(f.name), "pass it through a file or an environment variable "
                                         "set on the cluster")
    _validate_counts(spec)
    _validate_names(spec)
    _validate_command(spec)
    _validate_env(spec)
    _validate_target_rules(spec)
    validate_cluster(spec)


def _validate_counts(spec: RenderSpec) -> None:
    for name, minimum in (("nnodes", 1), ("nproc_per_node", 1), ("gpus_per_node", 0),
                          ("cpus_per_node", 0), ("backoff_limit", 0), ("master_port", 1)):
        value = getattr(spec, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            _fail(f"{_flag(name)} {value!r} is out of range (must be a whole number >= {minimum})",
                  _flag(name), f"pass {_flag(name)} {max(minimum, 1)} or more")
    if not 1 <= spec.master_port <= 65535:
        _fail(f"--master-port {spec.master_port} is outside 1..65535", "--master-port",
              "pick a port such as 29500")
    if spec.gpus_per_node and spec.nproc_per_node > spec.gpus_per_node:
        _fail(f"--nproc-per-node {spec.nproc_per_node} is more than --gpus-per-node "
              f"{spec.gpus_per_node}: worker {spec.gpus_per_node} would fail with 'invalid "
              "device ordinal'", "--nproc-per-node",
              f"use at most {spec.gpus_per_node} processes per node, or more GPUs per node "
              "(more GPUs in total means more nodes)")


def _validate_names(spec: RenderSpec) -> None:
    name = spec.job_name
    longest = _longest_host_suffix(spec)
    if not _DNS1035.match(name):
        _fail(f"--job-name {name!r} is not a DNS label (lowercase letters, digits and '-', "
              "starting with a letter, ending with a letter or digit)", "--job-name",
              f"use e.g. --job-name {_suggest_name(name)}")
    if len(name) + len(longest) > 63:
        _fail(f"--job-name {name!r} is {len(name)} characters; pod host names "
              f"'{name}{longest}' would pass the 63-character limit", "--job-name",
              f"use at most {63 - len(longest)} characters")
    if spec.namespace and (not _DNS1123.match(spec.namespace) or len(spec.namespace) > 63):
        _fail(f"--namespace {spec.namespace!r} is not a Kubernetes namespace name", "--namespace",
              "use lowercase letters, digits and '-' (at most 63)")
    if spec.run_id and not RUN_ID.match(spec.run_id):
        _fail(f"--run-id {spec.run_id!r} is not a usable run id", "--run-id",
              "use letters, digits, '.', '_' and '-' (at most 128), starting with a letter or "
              "digit")
    if spec.master_addr and not _HOST.match(spec.master_addr):
        _fail(f"--master-addr {spec.master_addr!r} is not a host name or IP address",
              "--master-addr", "give node 0's bare address, like 10.0.0.1 or node-0")
    if spec.shm_size and not _QUANTITY.match(spec.shm_size):
        _fail(f"--shm-size {spec.shm_size!r} is not a size", "--shm-size",
              "use a whole number with an optional unit Ki, Mi, Gi, Ti (or k, M, G, T), "
              "e.g. --shm-size 16Gi")
    if spec.shm_size and spec.shm_bytes() == 0:
        _fail("--shm-size 0 leaves no shared memory", "--shm-size", "use e.g. --shm-size 16Gi")
    if not spec.meshrun or not all(spec.meshrun):
        _fail("--meshrun is empty", "--meshrun", "use e.g. --meshrun meshrun or "
                                                 "--meshrun 'python -m meshrun'")
    if spec.log_dir.startswith("-"):
        _fail(f"--log-dir {spec.log_dir!r} starts with '-'", "--log-dir", "use e.g. ./logs")
    for flag, value in (("--partition", spec.partition), ("--time", spec.time_limit),
                        ("--account", spec.account)):
        if value and not _SLURM_WORD.match(value):
            _fail(f"{flag} {value!r} holds characters SLURM does not use there", flag,
                  "use letters, digits and . , : + - _ (e.g. --time 1-00:00:00)")


def _longest_host_suffix(spec: RenderSpec) -> str:
    last = spec.nnodes - 1
    return {"k8s": f"-{last}", "volcano": f"-node-{last}", "trainjob": f"-node-0-{last}",
            "pytorchjob": f"-worker-{max(last - 1, 0)}" if last else "-master-0"}.get(spec.target,
                                                                                      "")


def _suggest_name(name: str) -> str:
    cleaned = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    if not cleaned or not cleaned[0].isalpha():
        cleaned = "job-" + cleaned if cleaned else "train"
    return cleaned[:40].rstrip("-")


def _validate_command(spec: RenderSpec) -> None:
    cmd = spec.command
    if not cmd or not cmd[0] or (cmd[0] == "-m" and (len(cmd) < 2 or not cmd[1])):
        _fail("the training command is missing", "meshrun render",
              f"meshrun render {spec.target} [flags] -- train.py [ARGS...] "
              "(or -m package.module)", code="render-no-command")
    if cmd[0] != "-m" and cmd[0].startswith("-"):
        _fail(f"the training command starts with the option {cmd[0]!r}", "meshrun render",
              "put meshrun's flags before '--' and the script right after it")
    for word in spec.run_flags:
        name = word.split("=", 1)[0]
        if name in _NODE_FLAGS:
            _fail(f"run flag {word!r} is a node flag, which the platform (or this file) supplies",
                  name, f"drop it, or use render's own {name} where it has one",
                  code="render-node-flag")


def _validate_env(spec: RenderSpec) -> None:
    seen: set[str] = set()
    for name, _value in spec.env:
        if not _ENV_NAME.match(name):
            _fail(f"--env {name!r} is not a variable name", "--env",
                  "use NAME=VALUE with NAME made of letters, digits and '_'", code="render-bad-env")
        if name in seen:
            _fail(f"--env {name} is given twice", "--env", "give each variable once",
                  code="render-bad-env")
        seen.add(name)
        if name in _FLAG_VARS:
            _fail(f"--env {name} is set by the file itself", "--env",
                  f"use {_FLAG_VARS[name]} instead" if _FLAG_VARS[name].startswith("--")
                  else "drop it: each node's rank comes from the platform", code="render-bad-env")
        if name in _DEVICE_VARS:
            _fail(f"--env {name}: the platform assigns each node's GPUs", "--env",
                  "drop it; ask for GPUs with --gpus-per-node", code="render-bad-env")
        if platform_variable(name) or name in CONTEXT_VARIABLES:
            _fail(f"--env {name} belongs to the platform, which sets it on every node",
                  "--env", "drop it; meshrun reads the platform's own value", code="render-bad-env")


    for var, _secret, _key in spec.secret_env:
        if var in _FLAG_VARS or var in _DEVICE_VARS or platform_variable(var) \
                or var in CONTEXT_VARIABLES:
            _fail(f"--secret-env {var} is a variable the platform or this file sets",
                  "--secret-env", "use another variable name for the secret",
                  code="render-bad-secret")


def _validate_target_rules(spec: RenderSpec) -> None:
    t = spec.target
    if t in CONTAINER_TARGETS and not spec.image:
        _fail(f"'{t}' runs a container image but none was given", "--image",
              "pass --image REGISTRY/IMAGE:TAG (an image with meshrun and your code in it)",
              code="render-no-image")
    if t == "slurm" and spec.image:
        _fail("--image does not apply to slurm: the nodes run their own Python environment",
              "--image", "drop --image (or render docker for containers)",
              code="render-flag-not-applicable")
    if t in KUBE_TARGETS and spec.master_addr:
        _fail(f"--master-addr does not apply to '{t}': node 0's address is the job's own "
              "DNS name", "--master-addr", "drop --master-addr", code="render-flag-not-applicable")
    if t == "slurm" and spec.master_addr:
        _fail("--master-addr does not apply to slurm: node 0 is the first host of the "
              "allocation", "--master-addr", "drop --master-addr",
              code="render-flag-not-applicable")
    if t == "docker" and spec.nnodes > 1 and not spec.master_addr:
        _fail(f"{spec.nnodes} nodes but no master address for docker", "--master-addr",
              "pass --master-addr with node 0's address (the same on every node)",
              code="master-addr-missing")
    if t == "slurm" and spec.master_port != DEFAULT_MASTER_PORT:
        _fail("--master-port does not apply to slurm: each job's port is derived from its job "
              "id, so two jobs on one node never collide", "--master-port",
              "drop --master-port", code="render-flag-not-applicable")
    if t == "trainjob" and spec.master_port != TRAINJOB_MASTER_PORT:
        _fail(f"Kubeflow Trainer fixes the master port at {TRAINJOB_MASTER_PORT} "
              "(PET_MASTER_PORT)", "--master-port", "drop --master-port",
              code="render-flag-not-applicable")
    if t == "trainjob" and spec.backoff_limit:
        _fail("a TrainJob has no retry count of its own (the runtime's JobSet failurePolicy "
              "decides)", "--backoff-limit", "drop --backoff-limit, or set failurePolicy."
                                             "maxRestarts in the training runtime",
                                             code="render-flag-not-applicable")
    if t not in ("slurm",) and (spec.partition or spec.time_limit or spec.account):
        flag = "--partition" if spec.partition else "--time" if spec.time_limit else "--account"
        _fail(f"{flag} applies to slurm only", flag, f"drop {flag}",
              code="render-flag-not-applicable")
    if t not in KUBE_TARGETS and spec.namespace:
        _fail(f"--namespace applies to Kubernetes targets only, not '{t}'", "--namespace",
              "drop --namespace", code="render-flag-not-applicable")
    if t == "docker" and spec.cpus_per_node:
        _fail("--cpus-per-node does not apply to docker (a node's container gets the host's "
              "CPUs)", "--cpus-per-node", "drop --cpus-per-node", code="render-flag-not-applicable")
    if t in ("slurm",) and spec.shm_size:
        _fail("--shm-size does not apply to slurm (the node's /dev/shm is the host's)",
              "--shm-size", "drop --shm-size", code="render-flag-not-applicable")
    if t in ("slurm", "docker") and spec.backoff_limit:
        _fail(f"--backoff-limit does not apply to {t}", "--backoff-limit",
              "drop it; meshrun run's --max-restarts restarts the workers in place",
              code="render-flag-not-applicable")


def _flag(field_name: str) -> str:
    return {"command": "meshrun render", "env": "--env", "time_limit": "--time",
            "run_flags": "--run-args", "job_name": "--job-name",
            "regenerate": "meshrun render", "volumes": "--volume",
            "tolerations": "--toleration", "pull_secrets": "--image-pull-secret",
            "env_from_secrets": "--env-from-secret", "patches": "--patch"}.get(
                field_name, "--" + field_name.replace("_", "-"))

"""What a cluster asks of a submission file beyond the job itself: volumes, where pods may
run, who they run as, secrets, and a patch for the rest. Pure: parsing of the flags'
words, the rules they must keep, and the pieces the renderers write.

==============================  ============================================  ===============
flag                            what                                          targets
==============================  ============================================  ===============
``--volume KIND:SRC:PATH[:ro]`` a volume at PATH: ``pvc:CLAIM``, ``host:DIR``, k8s family;
                                ``secret:NAME``, ``configmap:NAME``           docker: host
``--node-selector KEY=VALUE``   the pods' ``nodeSelector``                    k8s family
``--toleration KEY[=V][:EFF]``  a toleration (``Exists`` without a value)     k8s family
``--service-account NAME``      the pods' ``serviceAccountName``              k8s family
``--image-pull-secret NAME``    ``imagePullSecrets``                          k8s family
``--env-from-secret NAME``      every key of Secret NAME as a variable        k8s, pytorchjob,
                                (``envFrom``)                                 volcano
``--secret-env VAR=NAME:KEY``   one variable from one key of a Secret         k8s family
``--patch FILE``                a YAML patch per object, merged last          k8s family
``--setup 'LINE'``              a shell line before ``srun`` (module load,   slurm
                                source venv/bin/activate)
==============================  ============================================  ===============

A patch document names the object it patches by ``kind`` (and ``metadata.name`` when
given); it is merged as Kubernetes' strategic merge does for the common case: mappings
merge key by key; the lists Kubernetes merges by a key merge item by item by that key
(containers, initContainers, volumes, env and imagePullSecrets by ``name``, volumeMounts by
``mountPath``, ports by ``containerPort`` or a Service's ``port``, a TrainJob's
runtimePatches by ``manager``; :data:`MERGE_KEYS`), a patch item without that key is
refused, any other list is replaced, and ``null`` removes a key. A patch that matches no
object is an error, never a silent no-op.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from typing import Any

from .spec import _fail

VOLUME_KINDS = ("pvc", "host", "secret", "configmap")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# --- the flags' words -> typed tuples ------------------------------------------------------

def parse_volume(text: str) -> tuple[str, str, str, str]:
    """``KIND:SOURCE:PATH[:ro|rw]`` -> ``(kind, source, path, "ro"|"rw")``."""
    parts = text.split(":")
    mode = "rw"
    if len(parts) == 4 and parts[3] in ("ro", "rw"):
        mode = parts.pop()
    if len(parts) != 3 or not all(parts):
        _fail(f"--volume {text!r} is not KIND:SOURCE:PATH[:ro]", "--volume",
              "e.g. --volume pvc:train-logs:/mnt/logs or --volume host:/data:/data:ro",
              code="render-bad-volume")
    kind, source, path = parts
    return kind, source, path, mode


def parse_selector(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        _fail(f"--node-selector {text!r} has no '='", "--node-selector",
              "use --node-selector KEY=VALUE, e.g. nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3",
              code="render-bad-selector")
    return key, value


def parse_toleration(text: str) -> tuple[str, str, str]:
    """``KEY[=VALUE][:EFFECT]`` -> ``(key, value, effect)``; "" where not given."""
    head, _, effect = text.partition(":")
    key, _, value = head.partition("=")
    return key, value, effect


def parse_secret_env(text: str) -> tuple[str, str, str]:
    """``VAR=SECRET:KEY`` -> ``(var, secret, key)``."""
    var, sep, rest = text.partition("=")
    secret, colon, key = rest.partition(":")
    if not sep or not colon:
        _fail(f"--secret-env {text!r} is not VAR=SECRET:KEY", "--secret-env",
              "e.g. --secret-env HF_TOKEN=hf-credentials:token", code="render-bad-secret")
    return var, secret, key


# --- the rules (validate.py calls this) ------------------------------------------------------

def validate_cluster(spec) -> None:
    """The cluster options' rules, each broken one a :class:`UsageError` line (exit 2)."""
    from .spec import CONTAINER_TARGETS, KUBE_TARGETS

    t = spec.target
    mounts: set[str] = set()
    for kind, source, path, mode in spec.volumes:
        flag = "--volume"
        shown = f"{kind}:{source}:{path}"
        if t not in CONTAINER_TARGETS:
            _fail(f"--volume does not apply to {t}: its nodes see their own file systems",
                  flag, "drop --volume (put the logs on the cluster's shared file system "
                        "with --log-dir)", code="render-flag-not-applicable")
        if kind not in VOLUME_KINDS:
            _fail(f"--volume {shown!r}: unknown kind {kind!r}", flag,
                  f"use one of: {', '.join(VOLUME_KINDS)}", code="render-bad-volume")
        if t == "docker" and kind != "host":
            _fail(f"--volume {kind}: docker mounts host folders only", flag,
                  f"use --volume host:/DIR:{path}", code="render-flag-not-applicable")
        if mode not in ("ro", "rw"):
            _fail(f"--volume {shown!r}: mode {mode!r} is not ro or rw", flag,
                  "end it with :ro for read-only, or nothing", code="render-bad-volume")
        if kind == "host":
            if not posixpath.isabs(source):
                _fail(f"--volume {shown!r}: the host folder {source!r} is not an absolute "
                      "path", flag, f"use e.g. --volume host:/data:{path}",
                      code="render-bad-volume")
        elif not (_DNS1123_SUBDOMAIN.match(source) and len(source) <= 253):
            _fail(f"--volume {shown!r}: {source!r} is not a Kubernetes object name", flag,
                  "use lowercase letters, digits, '-' and '.'", code="render-bad-volume")
        if not posixpath.isabs(path) or posixpath.normpath(path) in ("/", "/dev/shm"):
            _fail(f"--volume {shown!r}: the mount path {path!r} must be an absolute folder "
                  "other than / and /dev/shm", flag, "e.g. --volume pvc:train-logs:/mnt/logs",
                  code="render-bad-volume")
        if posixpath.normpath(path) in mounts:
            _fail(f"--volume: two volumes at {path}", flag, "give each mount path once",
                  code="render-bad-volume")
        mounts.add(posixpath.normpath(path))
    kube_only = (("--node-selector", spec.node_selector), ("--toleration", spec.tolerations),
                 ("--service-account", spec.service_account),
                 ("--image-pull-secret", spec.pull_secrets),
                 ("--env-from-secret", spec.env_from_secrets), ("--secret-env", spec.secret_env),
                 ("--patch", spec.patches))
    for flag, value in kube_only:
        if value and t not in KUBE_TARGETS:
            _fail(f"{flag} applies to Kubernetes targets only, not {t}", flag, f"drop {flag}",
                  code="render-flag-not-applicable")
    if spec.setup and t != "slurm":
        _fail(f"--setup applies to slurm only (a container image holds its environment), not "
              f"{t}", "--setup", "drop --setup, or build the set-up into the image",
              code="render-flag-not-applicable")
    if spec.env_from_secrets and t == "trainjob":
        _fail("--env-from-secret: a TrainJob takes variables one by one (trainer.env)",
              "--env-from-secret", "use --secret-env VAR=SECRET:KEY for each variable",
              code="render-flag-not-applicable")
    for key, value in spec.node_selector:
        if not _label_key(key) or (value and not (len(value) <= 63 and _LABEL_NAME.match(value))):
            _fail(f"--node-selector {key}={value} is not a Kubernetes label", "--node-selector",
                  "use KEY=VALUE with an optional DNS prefix and '/' in KEY, and at most 63 "
                  "letters, digits, '-', '_' and '.' in each name", code="render-bad-selector")
    if len({k for k, _ in spec.node_selector}) != len(spec.node_selector):
        _fail("--node-selector gives one key twice", "--node-selector",
              "give each key once (a pod needs every selector to match)",
              code="render-bad-selector")
    for key, value, effect in spec.tolerations:
        shown = key + (f"={value}" if value else "") + (f":{effect}" if effect else "")
        if not _label_key(key):
            _fail(f"--toleration {shown!r}: {key!r} is not a taint key", "--toleration",
                  "use KEY[=VALUE][:EFFECT], e.g. --toleration nvidia.com/gpu:NoSchedule",
                  code="render-bad-toleration")
        if value and not (len(value) <= 63 and _LABEL_NAME.match(value)):
            _fail(f"--toleration {shown!r}: {value!r} is not a taint value", "--toleration",
                  "use at most 63 letters, digits, '-', '_' and '.'",
                  code="render-bad-toleration")
        if effect and effect not in EFFECTS:
            _fail(f"--toleration {shown!r}: unknown effect {effect!r}", "--toleration",
                  f"use one of {', '.join(EFFECTS)}, or none for every effect",
                  code="render-bad-toleration")
    for flag, names in (("--service-account", (spec.service_account,) if spec.service_account
                         else ()), ("--image-pull-secret", spec.pull_secrets),
                        ("--env-from-secret", spec.env_from_secrets)):
        for name in names:
            if not (_DNS1123_SUBDOMAIN.match(name) and len(name) <= 253):
                _fail(f"{flag} {name!r} is not a Kubernetes object name", flag,
                      "use lowercase letters, digits, '-' and '.'", code="render-bad-value")
    plain = {name for name, _ in spec.env}
    secret_vars: set[str] = set()
    for var, secret, key in spec.secret_env:
        flag = "--secret-env"
        if not _ENV_NAME.match(var):
            _fail(f"--secret-env {var!r} is not a variable name", flag,
                  "use VAR=SECRET:KEY with VAR made of letters, digits and '_'",
                  code="render-bad-secret")
        if var in plain:
            again = "given twice" if var in secret_vars else "also given by --env"
            _fail(f"--secret-env {var} is {again}", flag, "give each variable once",
                  code="render-bad-secret")
        plain.add(var)
        secret_vars.add(var)
        if not (_DNS1123_SUBDOMAIN.match(secret) and len(secret) <= 253):
            _fail(f"--secret-env {var}: {secret!r} is not a Secret name", flag,
                  "use lowercase letters, digits, '-' and '.'", code="render-bad-secret")
        if not _SECRET_KEY.match(key) or key in (".", ".."):
            _fail(f"--secret-env {var}: {key!r} is not a Secret key", flag,
                  "use letters, digits, '-', '_' and '.'", code="render-bad-secret")
    for path, text in spec.patches:
        if any(ord(c) < 32 or ord(c) == 127 for c in path):
            _fail(f"--patch path {path!r} holds a control character", "--patch",
                  "rename the file", code="render-bad-patch")
        patch_documents(path, text)   # parses, or one line naming the file


def _label_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and not (prefix and len(prefix) <= 253 and _DNS1123_SUBDOMAIN.match(prefix)):
        return False
    return bool(name) and len(name) <= 63 and bool(_LABEL_NAME.match(name))


def secret_env_names(spec) -> set[str]:
    return {var for var, _, _ in spec.secret_env}


# --- the pieces the Kubernetes-family renderers write ----------------------------------------

def volume_name(index: int) -> str:
    return f"vol-{index}"


def pod_volumes(spec) -> list[dict]:
    out = []
    for index, (kind, source, _path, mode) in enumerate(spec.volumes):
        name = volume_name(index)
        if kind == "pvc":
            claim: dict = {"claimName": source}
            if mode == "ro":
                claim["readOnly"] = True
            out.append({"name": name, "persistentVolumeClaim": claim})
        elif kind == "host":
            out.append({"name": name, "hostPath": {"path": source, "type": "Directory"}})
        elif kind == "secret":
            out.append({"name": name, "secret": {"secretName": source}})
        else:
            out.append({"name": name, "configMap": {"name": source}})
    return out


def volume_mounts(spec) -> list[dict]:
    out = []
    for index, (kind, _source, path, mode) in enumerate(spec.volumes):
        mount: dict = {"name": volume_name(index), "mountPath": path}
        if mode == "ro" or kind in ("secret", "configmap"):   # both are read-only anyway
            mount["readOnly"] = True
        out.append(mount)
    return out


def pod_placement(spec) -> dict:
    """nodeSelector, tolerations, serviceAccountName, imagePullSecrets (what is given)."""
    out: dict = {}
    if spec.node_selector:
        out["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        out["tolerations"] = [_toleration(*t) for t in spec.tolerations]
    if spec.service_account:
        out["serviceAccountName"] = spec.service_account
    if spec.pull_secrets:
        out["imagePullSecrets"] = [{"name": name} for name in spec.pull_secrets]
    return out


def _toleration(key: str, value: str, effect: str) -> dict:
    out: dict = {"key": key, "operator": "Equal" if value else "Exists"}
    if value:
        out["value"] = value
    if effect:
        out["effect"] = effect
    return out


def secret_env_vars(spec) -> list[dict]:
    return [{"name": var, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
            for var, secret, key in spec.secret_env]


def env_from(spec) -> list[dict]:
    return [{"secretRef": {"name": name}} for name in spec.env_from_secrets]


def log_dir_note(spec) -> str | None:
    """A note when the log folder is on no volume the file mounts: the node logs and the
    bug-report bundle would go with the pod or container."""
    from .spec import CONTAINER_TARGETS

    if spec.target not in CONTAINER_TARGETS:
        return None
    where = spec.log_dir or "./logs"
    if spec.target == "docker" and posixpath.isabs(where):
        return None                     # docker mounts an absolute --log-dir itself
    if posixpath.isabs(where):
        for kind, _source, path, mode in spec.volumes:
            inside = posixpath.normpath(where) + "/"
            if kind in ("pvc", "host") and mode == "rw" and \
                    inside.startswith(posixpath.normpath(path).rstrip("/") + "/"):
                return None
    example = ("--log-dir /data/logs (an absolute folder is mounted from the host at the same "
               "path)" if spec.target == "docker"
               else "--volume pvc:CLAIM:/mnt/logs --log-dir /mnt/logs")
    return (f"the log folder ({where}) is on no volume this file mounts: the node logs and "
            f"the bug-report bundle go with the {'container' if spec.target == 'docker' else 'pod'}; "
            f"to keep them: {example}")


# --- patches ---------------------------------------------------------------------------------

def patch_documents(path: str, text: str) -> list[dict]:
    """The patch file's documents: each a mapping with a ``kind``. One line if not."""
    import yaml

    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        _fail(f"--patch {path} is not YAML{where}: {getattr(exc, 'problem', exc)}", "--patch",
              "fix the file; each document is a partial object with its kind",
              code="render-bad-patch")
    if not docs:
        _fail(f"--patch {path} holds no document", "--patch",
              "write e.g. 'kind: Job' then the fields to change", code="render-bad-patch")
    for doc in docs:
        if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str):
            _fail(f"--patch {path}: a document has no kind", "--patch",
                  "start each document with 'kind: Job' (or the object it patches)",
                  code="render-bad-patch")
    return docs


def apply_patches(spec, docs: Sequence[dict]) -> list[dict]:
    """``docs`` with every patch of ``spec`` merged in (see the module docstring)."""
    out = list(docs)
    for path, text in spec.patches:
        for patch in patch_documents(path, text):
            name = (patch.get("metadata") or {}).get("name") if isinstance(
                patch.get("metadata"), dict) else None
            hits = [i for i, doc in enumerate(out) if doc.get("kind") == patch["kind"]
                    and (name is None or doc.get("metadata", {}).get("name") == name)]
            if not hits:
                kinds = ", ".join(f"{d.get('kind')} {d.get('metadata', {}).get('name')}"
                                  for d in out)
                _fail(f"--patch {path}: no {patch['kind']}"
                      f"{' ' + name if name else ''} in this file (it holds {kinds})",
                      "--patch", "name an object the file holds, by kind (and metadata.name)",
                      code="render-bad-patch")
            for i in hits:
                out[i] = merge(out[i], patch)
    return out


# list fields merged item by item, by their key, as Kubernetes' strategic merge does
# (patchMergeKey); a field with two candidates takes the one its items carry (a
# container's ports by containerPort, a Service's by port); any other list is replaced
MERGE_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",), "initContainers": ("name",), "volumes": ("name",),
    "env": ("name",), "imagePullSecrets": ("name",), "replicatedJobs": ("name",),
    "volumeMounts": ("mountPath",), "ports": ("containerPort", "port"),
    "runtimePatches": ("manager",),
}


def merge(base: Any, patch: Any, field: str = "") -> Any:
    """Strategic-merge-like (see the module docstring and :data:`MERGE_KEYS`). Inputs are
    not changed. A patch item without the key of a keyed list is refused: it would replace
    or duplicate what meshrun wrote without a word."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = merge(base.get(key), value, key)
        return out
    if isinstance(base, list) and isinstance(patch, list) and field in MERGE_KEYS and base:
        key = next((k for k in MERGE_KEYS[field]
                    if all(isinstance(i, dict) and k in i for i in base)), None)
        if key is not None:
            out = list(base)
            for item in patch:
                if not isinstance(item, dict) or key not in item:
                    _fail(f"--patch: an item of {field} has no {key}, which names the item it "
                          "patches", "--patch", f"give each item of {field} its {key} (a new "
                          f"one, or one the file already has)", code="render-bad-patch")
                at = next((i for i, old in enumerate(out) if old[key] == item[key]), None)
                if at is None:
                    out.append(merge(None, item))
                else:
                    out[at] = merge(out[at], item, field)
            return out
    if isinstance(patch, dict):
        return {k: merge(None, v, k) for k, v in patch.items() if v is not None}
    return patch


__all__ = ["EFFECTS", "VOLUME_KINDS", "apply_patches", "env_from", "log_dir_note", "merge",
           "parse_secret_env", "parse_selector", "parse_toleration", "parse_volume",
           "patch_documents", "pod_placement", "pod_volumes", "secret_env_vars",
           "validate_cluster", "volume_mounts"]

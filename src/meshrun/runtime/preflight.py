"""Cross-node preflight: every node publishes a fingerprint; node 0 compares; a mismatch stops all.

The first step of every multi-node ``meshrun run`` (``--no-preflight`` skips it),
after the join and before any worker starts. Through the job's TCPStore:

1. each node publishes ``meshrun/preflight/fp/<rank>``: its :func:`fingerprint`;
2. node 0, once it has them all, publishes its clock (``meshrun/preflight/t0``);
   each node, already waiting for it, answers with its offset
   (``meshrun/preflight/offset/<rank>``): that measures clock skew to within the
   store's round trip (milliseconds);
3. node 0 runs :func:`compare` and publishes the verdict; every node prints it
   and, on a mismatch, stops with exit code 3 before any worker starts.

What must match on every node (anything else is identity, shown but not
compared): ``meshrun``, ``python``, ``torch``, ``cuda``, ``nccl`` versions, the
installed packages (a hash of every ``name==version``; the differing names are
listed), ``code`` (the git commit plus a hash of uncommitted changes of the
script's repository — tracked changes and untracked source/config files, not logs,
checkpoints or data: see :func:`code_state`; on one commit the first differing file
is named; outside git, a hash of the script), GPU model and count,
the active InfiniBand devices, and every ``--require-path`` (must exist
everywhere). A clock more than 1 s off node 0's is a warning.

:func:`fingerprint` gathers (effects: git, files, package metadata);
:func:`compare` and :func:`mismatch_table` are pure.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .. import __version__, protocol
from ..errors import StartupError
from ..plan import LaunchPlan
from ..signing import tallied, tally

SKEW_WARN_S = 1.0
# Compared field -> label in the table. Order is the table's order.
MUST_MATCH = {
    "code": "code",
    "meshrun": "meshrun version",
    "python": "Python version",
    "torch": "torch version",
    "cuda": "CUDA version",
    "nccl": "NCCL version",
    "packages": "installed packages",
    "gpu_model": "GPU model",
    "gpu_count": "GPU count",
    "ib": "active InfiniBand devices",
}


# --- the fingerprint (effects) -------------------------------------------------------------

def fingerprint(plan: LaunchPlan, *, require_paths: Sequence[str] = (),
                ib_devices: Sequence[str] = (), interface: str | None = None) -> dict:
    """This node's facts that must agree with the other nodes'."""
    import torch  # already imported by the launcher; cheap here

    nccl = ""
    try:
        if torch.cuda.is_available():
            version = torch.cuda.nccl.version()
            nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    except Exception:  # noqa: BLE001 - a CPU build or a broken driver: nothing to compare
        nccl = ""
    packages = package_list()
    target = plan.command.target if plan.command else ""
    checkpoints = getattr(getattr(plan.job, "checkpoint", None), "dir", "") or ""
    code, code_files = code_state(target, module=bool(plan.command and plan.command.module),
                                  exclude=(plan.log_dir, checkpoints))
    return {
        "node_rank": plan.node_rank,
        "hostname": plan.hostname or socket.gethostname(),
        "addresses": _addresses(),
        "meshrun": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none",
        "nccl": nccl or "none",
        "packages": hashlib.sha256("\n".join(packages).encode()).hexdigest()[:16],
        "package_list": packages,
        "code": code,
        "code_files": code_files,
        "gpu_model": plan.gpu_names[0] if plan.gpu_names else "none",
        "gpu_count": len(plan.visible_devices),
        "ib": ",".join(sorted(ib_devices)) or "none",
        "interface": interface or "",
        "paths": {path: os.path.exists(path) for path in require_paths},
        "clock": time.time(),
    }


def package_list() -> list[str]:
    """Sorted ``name==version`` of every installed distribution."""
    from importlib import metadata

    seen = set()
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").strip().lower().replace("_", "-")
        if name:
            seen.add(f"{name}=={dist.version}")
    return sorted(seen)


# Untracked files that count as code: sources and configs, small, outside output folders.
# Everything else untracked (logs, checkpoints, data, TensorBoard events, wandb/ runs)
# differs between nodes as a matter of course and is not compared.
CODE_SUFFIXES = (".py", ".pyi", ".pyx", ".pxd", ".toml", ".yaml", ".yml", ".cfg", ".ini",
                 ".sh")
CODE_NAMES = ("Dockerfile", "Makefile")
SKIP_DIRS = frozenset({"__pycache__", ".ipynb_checkpoints", "wandb", "mlruns",
                       ".pytest_cache", ".mypy_cache", ".ruff_cache", ".venv", "venv",
                       "site-packages", "node_modules",
                       # run outputs that hold YAML: Lightning's hparams, Hydra's configs
                       "lightning_logs", ".hydra", "outputs", "multirun"})
MAX_CODE_FILE = 1 << 20       # an untracked "code" file larger than 1 MiB is not code
MAX_LISTED = 200              # changed files listed per node, to name the first that differs


def code_identity(target: str, *, module: bool = False, exclude: Sequence[str] = ()) -> str:
    """``git <commit>[ + changes <hash>]`` for the script's repository, else ``file <sha256>``
    of the script (``none`` when there is no script file). See :func:`code_state`."""
    return code_state(target, module=module, exclude=exclude)[0]


def code_state(target: str, *, module: bool = False,
               exclude: Sequence[str] = ()) -> tuple[str, dict[str, str]]:
    """The code's identity and its changed files (``{path: sha256[:12] | "deleted"}``).

    In a git work tree: the commit, plus a hash over ``git diff HEAD`` (every tracked
    change) and the untracked files that are code — names ending in
    :data:`CODE_SUFFIXES` or in :data:`CODE_NAMES`, at most 1 MiB, not under
    :data:`SKIP_DIRS` nor under ``exclude`` (the run's log root and checkpoint folder).
    The file list (at most :data:`MAX_LISTED`) lets a mismatch name the first file
    that differs. Outside git: the script's hash, and no list.
    """
    path = _script_path(target, module)
    if path is None:
        return "none", {}
    folder = os.path.dirname(os.path.abspath(path))
    # git's own ownership check stays on (a repository another user owns is refused: its
    # config could run commands), and no file-system monitor is started for these reads.
    git = ["git", "-c", "core.fsmonitor=false", "-C", folder]
    try:
        commit = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10)
        if commit.returncode == 0:
            top = subprocess.run(git + ["rev-parse", "--show-toplevel"], capture_output=True,
                                 text=True, timeout=10).stdout.strip()
            diff = subprocess.run(git + ["diff", "HEAD", "--binary"], capture_output=True,
                                  timeout=30).stdout
            changed = subprocess.run(git + ["diff", "HEAD", "--name-only", "-z"],
                                     capture_output=True, timeout=30).stdout
            status = subprocess.run(git + ["status", "--porcelain", "--untracked-files=all",
                                           "-z"], capture_output=True, timeout=30).stdout
            files: dict[str, str] = {}
            for name in (n.decode(errors="replace") for n in changed.split(b"\0") if n):
                full = os.path.join(top, name)
                files[name] = _file_digest(full) if os.path.exists(full) else "deleted"
            # real paths throughout: git reports its top folder with symlinks resolved
            here = os.path.realpath(folder) + os.sep
            skip = [os.path.realpath(p) + os.sep for p in exclude if p]
            skip = [p for p in skip if not here.startswith(p)]  # never the script's own folder
            digest = hashlib.sha256(diff)
            for entry in status.split(b"\0"):
                if not entry.startswith(b"?? "):
                    continue
                name = entry[3:].decode(errors="replace")
                full = os.path.join(top, name)
                if _counts_as_code(name, full, skip):
                    files[name] = _file_digest(full)
                    digest.update(name.encode())
                    digest.update(files[name].encode())
            head = commit.stdout.strip()[:12]
            listed = dict(sorted(files.items())[:MAX_LISTED])
            identity = f"git {head}" + (f" + changes {digest.hexdigest()[:12]}"
                                        if diff.strip() or files else "")
            return identity, listed
    except (OSError, subprocess.SubprocessError):
        pass  # no git here: the script's content is the identity
    return f"file {_file_digest(path)}", {}


def _counts_as_code(name: str, full: str, skip: Sequence[str]) -> bool:
    """An untracked file that is code (see :func:`code_state`)."""
    parts = name.split("/")
    if any(part in SKIP_DIRS for part in parts[:-1]):
        return False
    if not (parts[-1].endswith(CODE_SUFFIXES) or parts[-1] in CODE_NAMES):
        return False
    if any(os.path.realpath(full).startswith(prefix) for prefix in skip):
        return False
    try:
        return os.path.getsize(full) <= MAX_CODE_FILE
    except OSError:
        return False


def first_code_difference(theirs: Mapping[str, str], ours: Mapping[str, str]) -> str | None:
    """The first file (by name) whose state differs between two :func:`code_state` lists."""
    for name in sorted(set(theirs) | set(ours)):
        if theirs.get(name) != ours.get(name):
            return name
    return None


def _script_path(target: str, module: bool) -> str | None:
    if not target:
        return None
    if module:
        origin = _module_file(target)
        return origin if origin and os.path.isfile(origin) else None
    return target if os.path.isfile(target) else None


def _module_file(target: str) -> str | None:
    """The file ``python -m target`` would run, found on the path the workers get (this
    folder first) one package at a time, without importing any of them: importlib's
    ``find_spec("a.b.c")`` would import ``a`` and ``a.b`` (user code) inside the agent."""
    import importlib.machinery
    import importlib.util
    import sys

    parts = target.split(".")
    try:
        spec = importlib.machinery.PathFinder.find_spec(parts[0], [os.getcwd(), *sys.path])
        if spec is None and len(parts) == 1:
            spec = importlib.util.find_spec(parts[0])  # a top-level name imports nothing
        for depth in range(1, len(parts)):
            where = spec.submodule_search_locations if spec else None
            if not where:
                return None
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:depth + 1]),
                                                            list(where))
    except (ImportError, ValueError):
        return None
    if spec is not None and spec.submodule_search_locations:
        # ``-m pkg`` runs pkg/__main__.py
        main = os.path.join(list(spec.submodule_search_locations)[0], "__main__.py")
        return main if os.path.isfile(main) else None
    return spec.origin if spec is not None else None


def _file_digest(path: str) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return "unreadable"
    return digest.hexdigest()[:12]


def _addresses() -> list[str]:
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, proto=socket.IPPROTO_TCP)
    except OSError:
        return []
    return sorted({info[4][0] for info in infos})


# --- the comparison (pure) -----------------------------------------------------------------

@dataclass(frozen=True)
class Difference:
    node_rank: int
    field: str
    theirs: str
    ours: str  # node 0's


@dataclass(frozen=True)
class Verdict:
    differences: tuple[Difference, ...] = ()
    warnings: tuple[str, ...] = ()
    hosts: Mapping[int, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.differences

    def to_json(self) -> dict:
        return {"ok": self.ok, "warnings": list(self.warnings),
                "hosts": {str(k): v for k, v in self.hosts.items()},
                "differences": [d.__dict__ for d in self.differences]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verdict:
        """Raises ValueError for anything that is not one (a stranger's value in the store)."""
        try:
            return cls(tuple(Difference(**d) for d in data["differences"]),
                       tuple(data["warnings"]), {int(k): v for k, v in data["hosts"].items()})
        except protocol.BAD_VALUE as exc:
            raise ValueError(f"not a preflight verdict: {str(data)[:80]!r}") from exc


def compare(prints: Mapping[int, Mapping[str, Any]],
            offsets: Mapping[int, float] | None = None) -> Verdict:
    """Node 0's fingerprint against every other's; ``offsets``: each node's clock minus node 0's."""
    base = prints[0]
    diffs: list[Difference] = []
    for rank in sorted(prints):
        theirs = prints[rank]
        if rank != 0:
            for name in MUST_MATCH:
                a, b = str(theirs.get(name, "")), str(base.get(name, ""))
                if a != b:
                    if name == "packages":
                        a, b = _package_difference(theirs.get("package_list", []),
                                                   base.get("package_list", []))
                    diffs.append(Difference(rank, name, a, b))
                    if name == "code":
                        diffs += _file_difference(rank, theirs, base)
        for path, exists in sorted(dict(theirs.get("paths", {})).items()):
            if not exists:
                diffs.append(Difference(rank, f"path {path}", "missing",
                                        "exists" if base.get("paths", {}).get(path) else
                                        "missing"))
    warnings = [f"node {rank}'s clock is {offset:+.1f} s off node 0's (more than "
                f"{SKEW_WARN_S:.0f} s): timestamps in logs will not line up; run NTP/chrony"
                for rank, offset in sorted((offsets or {}).items())
                if abs(offset) > SKEW_WARN_S]
    hosts = {rank: str(fp.get("hostname", "?")) for rank, fp in prints.items()}
    return Verdict(tuple(diffs), tuple(warnings), hosts)


def _file_difference(rank: int, theirs: Mapping[str, Any],
                     base: Mapping[str, Any]) -> list[Difference]:
    """On one commit with different changes: a row naming the first file that differs."""
    a, b = str(theirs.get("code", "")), str(base.get("code", ""))
    if not (a.startswith("git ") and a.split()[:2] == b.split()[:2]):
        return []
    name = first_code_difference(theirs.get("code_files", {}), base.get("code_files", {}))
    if name is None:
        return []
    state = lambda files: files.get(name, "as committed")  # noqa: E731
    return [Difference(rank, f"file {name}", state(theirs.get("code_files", {})),
                       state(base.get("code_files", {})))]


def _package_difference(theirs: Sequence[str], ours: Sequence[str]) -> tuple[str, str]:
    a, b = set(theirs), set(ours)
    only_theirs, only_ours = sorted(a - b), sorted(b - a)

    def show(items: list[str]) -> str:
        more = f" (+{len(items) - 3} more)" if len(items) > 3 else ""
        return (", ".join(items[:3]) + more) if items else "-"
    return show(only_theirs), show(only_ours)


def mismatch_table(verdict: Verdict) -> str:
    """The differences as an aligned table: the differing node, the field, that node's value,
    node 0's value (the same table on every node's console: no column means "this node")."""
    rows = [("node", "field", "its value", "node 0's value")]
    for d in verdict.differences:
        host = verdict.hosts.get(d.node_rank, "?")
        rows.append((f"{d.node_rank} ({host})", MUST_MATCH.get(d.field, d.field), d.theirs,
                     d.ours))
    widths = [min(48, max(len(row[i]) for row in rows)) for i in range(4)]
    lines = ["  " + "  ".join(cell[:48].ljust(w) for cell, w in zip(row, widths)).rstrip()
             for row in rows]
    return "\n".join(lines)


def summary(verdict: Verdict) -> str:
    nodes = sorted({d.node_rank for d in verdict.differences})
    fields = sorted({MUST_MATCH.get(d.field, d.field) for d in verdict.differences})
    who = ", ".join(f"node {r} ({verdict.hosts.get(r, '?')})" for r in nodes)
    return f"{who} differ{'s' if len(nodes) == 1 else ''} from node 0 in: {', '.join(fields)}"


# --- the exchange (effects: the store) -----------------------------------------------------

def exchange(store: Any, plan: LaunchPlan, mine: Mapping[str, Any], *,
             timeout_s: float) -> Verdict:
    """Publish ``mine``; node 0 compares everyone's; return the verdict every node sees."""
    wait = timedelta(seconds=timeout_s)
    store.set(protocol.fingerprint_key(plan.node_rank), json.dumps(mine))
    if plan.node_rank == 0:
        keys = [protocol.fingerprint_key(r) for r in range(plan.nnodes)]
        try:
            store.wait(keys, wait)
        except RuntimeError:  # DistStoreError: a wait timeout
            silent = [str(r) for r, k in enumerate(keys) if not store.check([k])]
            raise StartupError(
                f"preflight: node(s) {', '.join(silent)} joined but sent no fingerprint "
                f"within {timeout_s:g} s", code="preflight-timeout", subject="--no-preflight",
                hint="see those nodes' output (a crash, or a very slow git status or package "
                     "scan); --no-preflight skips the comparison") from None
        # One round trip each for N fingerprints and N - 1 clock offsets.
        prints = {r: json.loads(v) for r, v in enumerate(store.multi_get(keys))}
        store.set(protocol.PREFLIGHT_T0, repr(time.time()))
        offsets_keys = [protocol.offset_key(r) for r in range(1, plan.nnodes)]
        store.wait(offsets_keys, wait)
        offsets = {r: float(v) for r, v in zip(range(1, plan.nnodes),
                                                store.multi_get(offsets_keys))}
        verdict = compare(prints, offsets)
        store.set(protocol.PREFLIGHT_VERDICT, json.dumps(verdict.to_json()))
        # Node 0 hosts the store: on a mismatch it must not exit (closing the store) before
        # every node has read the verdict.
        deadline = time.monotonic() + min(timeout_s, 30)
        others = range(1, plan.nnodes)
        while tallied(store, protocol.PREFLIGHT_SEEN, others, plan.nnodes - 1) < \
                plan.nnodes - 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        return verdict
    store.wait([protocol.PREFLIGHT_T0], wait)
    t0 = float(store.get(protocol.PREFLIGHT_T0))
    store.set(protocol.offset_key(plan.node_rank), repr(time.time() - t0))
    store.wait([protocol.PREFLIGHT_VERDICT], wait)
    verdict = Verdict.from_json(json.loads(store.get(protocol.PREFLIGHT_VERDICT)))
    tally(store, protocol.PREFLIGHT_SEEN, plan.node_rank)
    return verdict


def against_node_0(store: Any, plan: LaunchPlan, mine: Mapping[str, Any]) -> Verdict:
    """A node that came back into a running job (:func:`meshrun.runtime.store.join`): its
    fingerprint against node 0's, published at the start (no clock offsets: node 0 is busy
    training, not waiting for this node)."""
    store.set(protocol.fingerprint_key(plan.node_rank), json.dumps(mine))
    key = protocol.fingerprint_key(0)
    if not store.check([key]):
        return Verdict(warnings=("node 0 published no fingerprint (it ran with "
                                 "--no-preflight): this node was not compared",))
    return compare({0: json.loads(store.get(key)), plan.node_rank: dict(mine)})


def check(verdict: Verdict) -> None:
    """Raise the one-line StartupError (exit 3) for a mismatch; the table is printed first."""
    if verdict.ok:
        return
    print("meshrun: preflight found differences between nodes; no worker was started:\n"
          + mismatch_table(verdict), flush=True)
    fields = {d.field for d in verdict.differences}
    hint = ("run the same code on every node (commit and sync, or use one image)"
            if "code" in fields else
            "install the same versions on every node (one image or one environment file)"
            if fields & {"meshrun", "python", "torch", "cuda", "nccl", "packages"} else
            "create the missing paths or fix --require-path" if any(
                f.startswith("path ") for f in fields) else
            "use nodes of one kind, or --no-preflight if this is intended")
    raise StartupError(f"preflight: {summary(verdict)}", code="preflight-mismatch",
                       subject="preflight", hint=hint + "; --no-preflight skips this check")

"""The layers of docs/architecture.md hold in the code: who may import whom (every import
statement, at module level or inside a function), module sizes, and the dotted names the
docstrings and docs point to still exist."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "meshrun"
HEAVY = {"torch", "numpy", "accelerate", "transformers", "deepspeed", "lightning"}

# package -> the meshrun packages it may import (besides itself); "recipes" means the
# torch-free registry (meshrun.recipes), never a recipe module.
PURE = {"errors", "redact", "protocol", "topology", "job", "nccl", "plan", "diagnose", "render",
        "outfile"}
ALLOWED = {
    "errors": set(),
    "redact": set(),
    "protocol": set(),
    "signing": {"errors", "protocol"},  # the job token: HMACs over the store's values
    "sockets": set(),
    "outfile": {"errors"},  # files the user named: written whole, read only if regular
    # nodes on loopback for the tests and the benchmarks; their threads by the planner's rule
    "harness": {"topology", "facts", "plan"},
    "topology": {"errors"},
    "facts": {"errors", "topology", "sockets"},  # sockets: a bounded name lookup (a leaf)
    "job": {"errors", "recipes", "outfile"},
    "nccl": {"errors", "facts", "plan"},
    "plan": {"errors", "redact", "topology", "facts", "job", "nccl"},
    "diagnose": {"errors", "redact"},
    "render": {"errors", "topology", "plan", "job", "outfile"},  # --patch read via outfile
    "reports": {"errors", "redact", "plan", "diagnose", "runtime", "outfile"},  # report.html
    "worker": {"errors", "job", "protocol", "signing", "sockets"},
    "recipes": {"errors", "job", "worker"},
    "runtime": {"errors", "redact", "protocol", "signing", "sockets", "topology", "facts", "job", "nccl", "plan", "diagnose",
                "render", "reports", "recipes", "worker"},
    "cli": None,  # the top: anything
    "__init__": {"worker"},  # meshrun.init_distributed / meshrun.progress, on first use
}


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path``."""
    rel = list(path.relative_to(SRC).with_suffix("").parts)
    package = ["meshrun", *(rel if path.name == "__init__.py" else rel[:-1])]
    if path.name == "__init__.py":
        package = package[:-1] + [rel[-2]] if len(rel) > 1 else ["meshrun"]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
                if node.module is None:  # from . import x
                    found += [(node.lineno, f"{name}.{alias.name}") for alias in node.names]
                    continue
            else:
                name = node.module or ""
            found.append((node.lineno, name))
    return found


def _package(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("").parts
    return rel[0]


MODULES = sorted(p for p in SRC.rglob("*.py") if p.name != "__main__.py")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_follow_the_layers(path):
    me = _package(path)
    allowed = ALLOWED.get(me, set())
    for line, name in _imports(path):
        parts = name.split(".")
        where = f"{path.relative_to(SRC)}:{line} imports {name}"
        if parts[0] in HEAVY:
            assert me not in PURE and me != "facts", where
            continue
        if parts[0] != "meshrun" or len(parts) < 2 or parts[1] in (me, "__version__"):
            continue
        if allowed is None:
            continue
        assert parts[1] in allowed, where
        if parts[1] == "recipes" and me != "runtime":
            assert len(parts) == 2, f"{where}: only the registry, meshrun.recipes"


def test_the_runtime_imports_torch_only_when_it_runs():
    # runtime modules may use torch, but only inside functions: `meshrun plan` imports them.
    for path in (SRC / "runtime").glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) \
                    else [node.module or ""]
                assert not any(n.split(".")[0] in HEAVY for n in names), path


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_a_long_module_says_why(path):
    text = path.read_text()
    if text.count("\n") <= 520:
        return
    doc = ast.get_docstring(ast.parse(text)) or ""
    assert "longer than the others because" in doc, \
        f"{path.relative_to(SRC)} has {text.count(chr(10))} lines; split it or say why"


DOTTED = re.compile(r"\bmeshrun(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        try:
            for attr in parts[k:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def _texts():
    yield from MODULES
    yield from sorted((ROOT / "docs").glob("*.md"))
    yield ROOT / "README.md"


@pytest.mark.parametrize("path", list(_texts()), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_dotted_name_in_the_code_and_docs_exists(path):
    text = path.read_text()
    missing = sorted({m.group(0).rstrip(".") for m in DOTTED.finditer(text)
                      if not m.group(0).endswith((".py", ".toml", ".json", ".log", ".md"))
                      and not _resolves(m.group(0).rstrip("."))})
    assert not missing, f"{path.relative_to(ROOT)} names {missing}, which do not exist"

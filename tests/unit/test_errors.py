"""One diagnostic shape (meshrun.errors): every error names a stable code, prints it at the end
of its one line and in --json, and every code is in docs/errors.md."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from meshrun.errors import CODE, CODE_SUFFIX, Finding, StartupError, TrainingError, UsageError

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "meshrun"


def _constructions():
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ("UsageError", "StartupError", "TrainingError",
                                     "MeshrunError"):
                yield path, node


def test_every_error_names_a_kebab_case_code():
    missing, bad = [], []
    for path, node in _constructions():
        code = next((k.value for k in node.keywords if k.arg == "code"), None)
        where = f"{path.relative_to(ROOT)}:{node.lineno}"
        if code is None:
            missing.append(where)
        elif isinstance(code, ast.Constant) and not CODE.match(code.value):
            bad.append((where, code.value))
    assert not missing, missing
    assert not bad, bad


def test_the_docs_table_is_current():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "error_codes.py"), "--check"])
    assert done.returncode == 0, "run: python scripts/error_codes.py"
    table = (ROOT / "docs" / "errors.md").read_text()
    for _, node in _constructions():
        code = next(k.value for k in node.keywords if k.arg == "code")
        if isinstance(code, ast.Constant):  # (render's _fail passes its caller's code on)
            assert f"| `{code.value}` |" in table, code.value


def test_one_line_one_shape():
    err = UsageError("--nnodes 2 but no master address", hint="pass --master-addr",
                     subject="--master-addr", code="master-addr-missing")
    line = err.line()
    assert line == ("meshrun: error: --nnodes 2 but no master address; fix: pass --master-addr "
                    "[master-addr-missing]")
    assert CODE_SUFFIX.search(line).group("code") == "master-addr-missing"
    assert err.to_json() == {"code": "master-addr-missing", "severity": "error",
                             "subject": "--master-addr",
                             "message": "--nnodes 2 but no master address",
                             "fix": "pass --master-addr"}
    assert StartupError("x", code="port-in-use").exit_code == 3 and err.exit_code == 2
    assert TrainingError("x", code="loss-not-finite").exit_code == 1   # a worker's failure
    finding = Finding("disk-space", "warning", "checkpoints", "1 GiB free", "free space")
    assert finding.line() == "meshrun: warning: 1 GiB free; fix: free space [disk-space]"
    with pytest.raises(ValueError):
        Finding("Not Kebab", "error", "x", "y")
    with pytest.raises(ValueError):
        UsageError("x", code="no_underscores")


def test_the_code_ends_the_line_and_stdout_stays_empty(tmp_path):
    done = subprocess.run([sys.executable, "-m", "meshrun", "plan", "--json", "--nnodes", "2"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().endswith("[node-rank-missing]")

#!/usr/bin/env python3
"""Write docs/errors.md: every code meshrun prints, in one table, read off the source.

    python scripts/error_codes.py          # rewrite docs/errors.md
    python scripts/error_codes.py --check  # exit 1 when it is out of date

Codes come from every ``UsageError``/``StartupError``/``TrainingError`` (and render's ``_fail``) in
``src/meshrun`` (the ``code=`` each one names, its exit code, the module, its message as
written), the NCCL lint's :data:`meshrun.nccl.LINT_CODES`, ``meshrun doctor``'s checks and
the diagnose catalog.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "meshrun"
DOC = ROOT / "docs" / "errors.md"
sys.path.insert(0, str(ROOT / "src"))

HEAD = """# Error codes

Every line meshrun prints about something wrong has one shape (`meshrun.errors`):

```
meshrun: error: MESSAGE; fix: WHAT TO DO [code]
```

(on stderr; stdout stays empty). `meshrun doctor --json` and `meshrun diagnose --json` carry
the same five keys: code, severity, subject, message, fix. The code is stable: search for it
here.
Errors stop meshrun before anything starts (exit 2: bad input) or while the job starts
(exit 3), or stop a recipe's training on every rank (exit 1: `loss-not-finite`); findings
(the NCCL lint, `meshrun doctor`) and diagnoses (`meshrun diagnose`) report. This file is
written by `python scripts/error_codes.py` from the source; a test fails when it is out of
date.

"""


def _template(node: ast.AST, text: str) -> str:
    """An error's message as written: f-string fields shown as `{...}`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "…" for v in node.values)
    if isinstance(node, ast.BinOp):
        return _template(node.left, text) + _template(node.right, text)
    return "…"


def errors() -> dict[str, dict]:
    """code -> {"exit": 1|2|3, "where": {modules}, "example": first message}."""
    found: dict[str, dict] = {}
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            name = node.func.id
            if name not in ("UsageError", "StartupError", "TrainingError", "MeshrunError",
                            "_fail"):
                continue
            code = next((k.value.value for k in node.keywords if k.arg == "code"
                         and isinstance(k.value, ast.Constant)), None)
            if name == "_fail" and code is None:
                code = "render-bad-value" if "render" in path.parts else None
            if code is None:
                continue
            exit_code = {"StartupError": 3, "TrainingError": 1}.get(name, 2)
            entry = found.setdefault(code, {"exit": exit_code,
                                            "where": set(), "example": ""})
            entry["where"].add(".".join(path.relative_to(SRC.parent).with_suffix("").parts))
            if not entry["example"] and node.args:
                entry["example"] = re.sub(r"\s+", " ", _template(node.args[0], text)).strip()
    return found


def table() -> str:
    from meshrun.diagnose import CATALOG
    from meshrun.nccl import LINT_CODES

    rows = ["## Errors", "", "| code | exit | raised in | message (as written) |",
            "|---|---|---|---|"]
    for code, entry in sorted(errors().items()):
        where = ", ".join(f"`{w.removeprefix('meshrun.')}`" for w in sorted(entry["where"]))
        example = entry["example"].replace("|", "\\|")[:140]
        rows.append(f"| `{code}` | {entry['exit']} | {where} | {example} |")
    rows += ["", "## Findings: the NCCL environment lint (`meshrun doctor`, docs/network.md)", "",
             "| code | what it means |", "|---|---|"]
    rows += [f"| `{code}` | {text} |" for code, text in sorted(LINT_CODES.items())]
    doctor = sorted(set(re.findall(r'Check\("([a-z0-9-]+)"', (SRC / "runtime" / "doctor.py")
                                   .read_text())))
    rows += ["", "## Findings: `meshrun doctor`'s own checks", "",
             "| code |", "|---|"] + [f"| `{code}` |" for code in doctor]
    seen: dict[str, str] = {}
    for sig in CATALOG:
        seen.setdefault(sig.code, sig.summary)
    rows += ["", "## Diagnoses (`meshrun diagnose`; causes and fixes in docs/diagnose.md)", "",
             "| code | summary |", "|---|---|"]
    rows += [f"| `{code}` | {summary} |" for code, summary in seen.items()]
    rows += ["| `unknown` | a failure no signature knows (its first error line is shown) |"]
    return HEAD + "\n".join(rows) + "\n"


def main() -> int:
    text = table()
    if "--check" in sys.argv[1:]:
        return 0 if DOC.exists() and DOC.read_text() == text else 1
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

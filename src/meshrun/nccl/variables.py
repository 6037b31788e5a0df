"""The table of NCCL and torch-NCCL variables the lint knows (``variables.toml``, beside this
file), loaded once and checked as it loads: a contributor extends the table without reading
the lint, and a mistake in it fails at import, not in a user's run.

Exposes :data:`KNOWN_NCCL`, :data:`KNOWN_TORCH_NCCL`, :data:`PLUGIN_PREFIXES`,
:data:`DEPRECATED` (old name -> new), :data:`REMOVED` (name -> (what, fix)), :data:`UNREAD`
(name -> why) and :data:`RULES` (name -> :class:`Rule`: the values accepted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

TABLE = Path(__file__).with_name("variables.toml")
KINDS = ("int", "float", "choice", "level", "tokens")
SEVERITIES = ("error", "warning")
_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


@dataclass(frozen=True)
class Rule:
    """The values a variable accepts."""

    kind: str                                  # one of KINDS
    choices: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    severity: str = "error"                    # when a number is out of range / not a choice
    note: str = ""
    example: str = ""


class TableError(ValueError):
    """``variables.toml`` holds something the lint cannot use."""


def load(path: Path = TABLE) -> dict[str, Any]:
    """Read and check the table; raises :class:`TableError` naming the entry."""
    with open(path, "rb") as handle:
        data = tomllib.load(handle)
    known = data.get("known", {})
    nccl = _names(known.get("nccl"), "known.nccl")
    torch_nccl = _names(known.get("torch_nccl"), "known.torch_nccl")
    prefixes = tuple(known.get("plugin_prefixes", ()))
    if not all(isinstance(p, str) and p.endswith("_") for p in prefixes):
        raise TableError("known.plugin_prefixes: each must be a string ending in '_'")
    everything = nccl | torch_nccl
    deprecated = dict(data.get("deprecated", {}))
    for old, new in deprecated.items():
        if new not in everything:
            raise TableError(f"deprecated.{old}: {new!r} is not in [known]")
    removed = {}
    for name, entry in data.get("removed", {}).items():
        if not isinstance(entry, dict) or set(entry) != {"what", "fix"}:
            raise TableError(f"removed.{name}: give what = ... and fix = ...")
        removed[_name(name, "removed")] = (entry["what"], entry["fix"])
    unread = {_name(k, "unread"): str(v) for k, v in data.get("unread", {}).items()}
    rules = {name: _rule(name, entry) for name, entry in data.get("rules", {}).items()}
    for name in data.get("booleans", {}).get("names", ()):
        if name in rules:
            raise TableError(f"booleans: {name} also has [rules.{name}]")
        rules[_name(name, "booleans")] = Rule("int", ("0", "1"), severity="warning")
    for name in rules:
        if name.startswith(("NCCL_", "TORCH_NCCL_")) and name not in everything:
            raise TableError(f"rules.{name}: an NCCL name with a rule must be in [known]")
    return {"KNOWN_NCCL": frozenset(nccl), "KNOWN_TORCH_NCCL": frozenset(torch_nccl),
            "PLUGIN_PREFIXES": prefixes, "DEPRECATED": deprecated, "REMOVED": removed,
            "UNREAD": unread, "RULES": rules}


def _names(values: Any, where: str) -> set[str]:
    if not isinstance(values, list):
        raise TableError(f"{where}: a list of names")
    return {_name(v, where) for v in values}


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise TableError(f"{where}: {value!r} is not a variable name")
    return value


def _rule(name: str, entry: Any) -> Rule:
    _name(name, "rules")
    if not isinstance(entry, dict):
        raise TableError(f"rules.{name}: a table")
    unknown = set(entry) - {"kind", "choices", "low", "high", "severity", "note", "example"}
    if unknown:
        raise TableError(f"rules.{name}: unknown keys {sorted(unknown)}")
    rule = Rule(kind=entry.get("kind", ""), choices=tuple(entry.get("choices", ())),
                low=entry.get("low"), high=entry.get("high"),
                severity=entry.get("severity", "error"), note=entry.get("note", ""),
                example=entry.get("example", ""))
    if rule.kind not in KINDS:
        raise TableError(f"rules.{name}: kind {rule.kind!r} is not one of {', '.join(KINDS)}")
    if rule.severity not in SEVERITIES:
        raise TableError(f"rules.{name}: severity {rule.severity!r}")
    if not all(isinstance(c, str) for c in rule.choices):
        raise TableError(f"rules.{name}: choices are strings")
    if rule.kind in ("choice", "level", "tokens") and not rule.choices:
        raise TableError(f"rules.{name}: a {rule.kind} rule needs choices")
    if rule.low is not None and rule.high is not None and rule.low > rule.high:
        raise TableError(f"rules.{name}: low {rule.low} > high {rule.high}")
    return rule


_TABLE = load()
KNOWN_NCCL: frozenset[str] = _TABLE["KNOWN_NCCL"]
KNOWN_TORCH_NCCL: frozenset[str] = _TABLE["KNOWN_TORCH_NCCL"]
PLUGIN_PREFIXES: tuple[str, ...] = _TABLE["PLUGIN_PREFIXES"]
DEPRECATED: dict[str, str] = _TABLE["DEPRECATED"]
REMOVED: dict[str, tuple[str, str]] = _TABLE["REMOVED"]
UNREAD: dict[str, str] = _TABLE["UNREAD"]
RULES: dict[str, Rule] = _TABLE["RULES"]

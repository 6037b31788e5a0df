"""The lint of an environment's NCCL and torch-NCCL variables: names nothing reads (typos,
with a suggestion), deprecated and removed names, values NCCL/torch reject, and settings that
cannot work on this host (with the host's network facts). Pure: env (+ facts) in, findings
out. The knowledge is data: :mod:`.variables` (``variables.toml``). Codes: :data:`LINT_CODES`
and docs/network.md.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .. import errors
from ..errors import SEVERITIES
from ..facts.net import NetFacts
from .policy import ports_text, roce_v2_gid_index
from .syntax import parse_float, parse_int, parse_nccl_list, split_names
from .variables import (
    DEPRECATED,
    KNOWN_NCCL,
    KNOWN_TORCH_NCCL,
    PLUGIN_PREFIXES,
    REMOVED,
    RULES,
    UNREAD,
    Rule,
)

LINT_CODES = {
    "env-unknown": "an NCCL_* / TORCH_NCCL_* name nothing reads (likely a typo)",
    "env-unread": "a variable people set for a timeout that nothing reads",
    "env-deprecated": "an old name still read, with a deprecation warning",
    "env-removed": "a variable NCCL no longer reads",
    "env-bad-value": "a value NCCL/torch rejects or ignores",
    "env-legacy-value": "an accepted but discouraged value",
    "env-no-such-iface": "names a network interface this host lacks",
    "env-iface-unusable": "selects only interfaces that are down or have no address",
    "env-no-such-hca": "names an RDMA device or port this host lacks",
    "env-ib-disabled": "InfiniBand settings while NCCL_IB_DISABLE=1",
    "env-ib-unavailable": "InfiniBand settings on a host without an active RDMA port",
    "env-gid-index": "NCCL_IB_GID_INDEX does not fit this host's GID tables",
    "env-no-effect": "set, but without effect as combined",
}


@dataclass(frozen=True)
class Finding(errors.Finding):
    """One lint result, in meshrun's one diagnostic shape (:class:`meshrun.errors.Finding`),
    with a code of :data:`LINT_CODES`."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.code not in LINT_CODES:
            raise ValueError(f"unknown lint code {self.code!r}")


_TIMEOUT_HINT = ("set MESHRUN_PG_TIMEOUT=<seconds> (meshrun.init_distributed passes it to "
                 "init_process_group) or pass init_process_group(timeout=timedelta(...)); "
                 "meshrun sets it by node count")


_LEVELS_BY_NAME = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
_LINTED_PREFIXES = ("NCCL_", "TORCH_NCCL_")
_KNOWN = KNOWN_NCCL | KNOWN_TORCH_NCCL


def lint_env(env: Mapping[str, str], facts: NetFacts | None = None) -> list[Finding]:
    """Check the NCCL/torch variables of ``env``; with ``facts``, also against this host.

    Returns findings in variable-name order, cross-variable findings last. Pure.
    """
    found: list[Finding] = []
    names = sorted(env)
    for name in names:
        value = env[name]
        if not name.startswith(_LINTED_PREFIXES) and name not in UNREAD and name not in RULES:
            continue
        found += _lint_name(name, value)
        rule = RULES.get(name) or RULES.get(DEPRECATED.get(name, ""))
        if rule and value.strip():
            found += _lint_value(name, value, rule)
    found += _lint_combinations(env)
    if facts is not None:
        found += _lint_host(env, facts)
    return found


def _lint_name(name: str, value: str) -> list[Finding]:
    shown = f"{name}={value}"
    if name in UNREAD:
        return [Finding("env-unread", "warning", name, f"{shown}: {UNREAD[name]}",
                        _TIMEOUT_HINT)]
    if name in DEPRECATED:
        new = DEPRECATED[name]
        return [Finding("env-deprecated", "warning", name,
                        f"{shown}: {name} is deprecated; {new} replaces it",
                        f"rename it to {new}={value}")]
    if name in REMOVED:
        what, hint = REMOVED[name]
        return [Finding("env-removed", "warning", name, f"{shown}: {name} was {what}; NCCL "
                        "ignores it", hint)]
    if name in _KNOWN or name in RULES or name.startswith(PLUGIN_PREFIXES):
        return []
    if not name.startswith(_LINTED_PREFIXES):
        return []
    pool = sorted(_KNOWN | set(DEPRECATED) | set(UNREAD))
    scored = sorted(((difflib.SequenceMatcher(None, name, known).ratio(), known)
                     for known in pool), reverse=True)
    close = [known for score, known in scored[:2] if score >= 0.8 and score >= scored[0][0] - 0.05]
    family = "torch's ProcessGroupNCCL" if name.startswith("TORCH_NCCL_") else "NCCL"
    hint = (f"did you mean {' or '.join(close)}?" if close
            else "check the name in NCCL's or torch's documentation, or remove it")
    return [Finding("env-unknown", "warning", name,
                    f"{name}: unknown; {family} reads no such variable", hint)]


def _lint_value(name: str, value: str, rule: Rule) -> list[Finding]:
    raw = value.strip()
    shown = f"{name}={value}"
    extra = f" ({rule.note})" if rule.note else ""
    if rule.kind in ("int", "float"):
        number = parse_int(raw) if rule.kind == "int" else parse_float(raw)
        if number is None:
            what = "a whole number" if rule.kind == "int" else "a number"
            example = rule.example or (rule.choices[0] if rule.choices
                                       else _num(max(rule.low or 0, 1)))
            return [Finding("env-bad-value", "error", name, f"{shown} is not {what}{extra}",
                            f"set {name} to {what}, e.g. {name}={example}")]
        if rule.choices and str(number) not in rule.choices:
            return [Finding("env-bad-value", rule.severity, name,
                            f"{shown} is not one of {', '.join(rule.choices)}{extra}",
                            f"set {name} to one of {', '.join(rule.choices)}")]
        if (rule.low is not None and number < rule.low) or \
                (rule.high is not None and number > rule.high):
            if rule.high is not None:
                span = f"{_num(rule.low)}..{_num(rule.high)}"
            elif rule.kind == "float":
                span = "> 0"
            else:
                span = f">= {_num(rule.low)}"
            return [Finding("env-bad-value", rule.severity, name,
                            f"{shown} is outside {span}{extra}", f"set {name} within {span}")]
        return []
    if rule.kind == "choice":
        if raw.upper() not in rule.choices:
            return [Finding("env-bad-value", rule.severity, name,
                            f"{shown} is not one of {', '.join(rule.choices)}{extra}",
                            f"set {name} to one of {', '.join(rule.choices)}")]
        return []
    if rule.kind == "level":
        if raw.upper() in rule.choices:
            return []
        if raw.isdigit():
            word = _LEVELS_BY_INT[min(int(raw), 4)]
            return [Finding("env-legacy-value", "info", name,
                            f"{shown} is a legacy integer level, read as {word}",
                            f"write {name}={word}: integer levels changed meaning between "
                            "NCCL versions")]
        return [Finding("env-bad-value", "error", name,
                        f"{shown} is not one of {', '.join(rule.choices)}",
                        f"set {name} to one of {', '.join(rule.choices)}")]
    # tokens: NCCL_ALGO / NCCL_PROTO ("[func:][^]a,b;func:..."), NCCL_DEBUG_SUBSYS ("[^]A,B")
    bad = [t for t in _tokens(raw) if t.upper() not in rule.choices]
    if bad:
        return [Finding("env-bad-value", rule.severity, name,
                        f"{shown}: unknown {'value' if len(bad) == 1 else 'values'} "
                        f"{', '.join(bad)}", f"use {', '.join(rule.choices)}")]
    return []


_LEVELS_BY_INT = ("LOC", "PIX", "PXB", "PHB", "SYS")


def _tokens(raw: str) -> list[str]:
    out = []
    for part in raw.split(";"):
        part = part.split(":", 1)[1] if ":" in part else part
        part = part.strip().lstrip("^")
        out += [t.strip() for t in part.split(",") if t.strip()]
    return out


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:g}"


def _lint_combinations(env: Mapping[str, str]) -> list[Finding]:
    found = []
    if env.get("NCCL_IB_DISABLE", "").strip() == "1":
        ib = [n for n in sorted(env) if n.startswith("NCCL_IB_") and n != "NCCL_IB_DISABLE"]
        if ib:
            found.append(Finding("env-ib-disabled", "warning", ib[0],
                                 f"{', '.join(ib)} set with NCCL_IB_DISABLE=1: NCCL uses TCP "
                                 "sockets and ignores them",
                                 "remove the NCCL_IB_* settings, or NCCL_IB_DISABLE=1 to use "
                                 "InfiniBand"))
    threads, socks = parse_int(env.get("NCCL_SOCKET_NTHREADS", "1") or "1"), \
        parse_int(env.get("NCCL_NSOCKS_PERTHREAD", "1") or "1")
    if threads and socks and threads * socks > 64:
        found.append(Finding("env-bad-value", "error", "NCCL_NSOCKS_PERTHREAD",
                             f"NCCL_SOCKET_NTHREADS={threads} x NCCL_NSOCKS_PERTHREAD={socks} = "
                             f"{threads * socks}, above NCCL's limit of 64",
                             "lower one of them, e.g. 4 x 4"))
    subsys = env.get("NCCL_DEBUG_SUBSYS", "").strip()
    if subsys and env.get("NCCL_DEBUG", "").strip().upper() not in ("INFO", "TRACE"):
        found.append(Finding("env-no-effect", "info", "NCCL_DEBUG_SUBSYS",
                             f"NCCL_DEBUG_SUBSYS={subsys} filters INFO/TRACE output, but "
                             f"NCCL_DEBUG={env.get('NCCL_DEBUG', '(unset)')}",
                             "set NCCL_DEBUG=INFO, or remove NCCL_DEBUG_SUBSYS"))
    dump = env.get("TORCH_NCCL_DUMP_ON_TIMEOUT", "").strip()
    if dump == "1" and (parse_int(env.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "0") or "0") or 0) <= 0:
        found.append(Finding("env-no-effect", "info", "TORCH_NCCL_DUMP_ON_TIMEOUT",
                             "TORCH_NCCL_DUMP_ON_TIMEOUT=1 dumps the flight recorder, which "
                             "records nothing while TORCH_NCCL_TRACE_BUFFER_SIZE is 0 or unset",
                             "also set TORCH_NCCL_TRACE_BUFFER_SIZE, e.g. 2000"))
    return found


def _lint_host(env: Mapping[str, str], facts: NetFacts) -> list[Finding]:
    found: list[Finding] = []
    names = [i.name for i in facts.interfaces]
    have = ", ".join(names) or "none"
    ifname = env.get("NCCL_SOCKET_IFNAME", "").strip()
    if ifname:
        found += _lint_socket_ifname(ifname, facts, have)
    gloo = env.get("GLOO_SOCKET_IFNAME", "").strip()
    for token in split_names(gloo):
        if token not in names:
            found.append(Finding("env-no-such-iface", "error", "GLOO_SOCKET_IFNAME",
                                 f"GLOO_SOCKET_IFNAME={gloo} names {token}, but this host's "
                                 f"interfaces are: {have}",
                                 "name an interface of this host (ip addr), or unset it to "
                                 "let meshrun pick the one routing to the master"))
    ib_disabled = env.get("NCCL_IB_DISABLE", "").strip() == "1"
    active = facts.active_ib_ports
    hca = env.get("NCCL_IB_HCA", "").strip()
    if hca and not ib_disabled:
        found += _lint_hca(hca, facts)
    ib_set = [n for n in sorted(env) if n.startswith("NCCL_IB_") and n != "NCCL_IB_DISABLE"]
    if env.get("NCCL_IB_DISABLE", "").strip() == "0":
        ib_set.insert(0, "NCCL_IB_DISABLE=0")
    if not active and not ib_disabled and ib_set and \
            not any(e.startswith("infiniband:") for e in facts.errors):
        devices = ", ".join(d.name for d in facts.ib_devices) or "none"
        found.append(Finding("env-ib-unavailable", "warning", ib_set[0].split("=")[0],
                             f"{', '.join(ib_set)} set, but this host has no active "
                             f"InfiniBand/RoCE port (RDMA devices: {devices}): NCCL will use "
                             "TCP sockets", "check the HCAs with ibstat, or set "
                             "NCCL_IB_DISABLE=1 and drop the NCCL_IB_* settings"))
    gid = env.get("NCCL_IB_GID_INDEX", "").strip()
    if gid and not ib_disabled and active and parse_int(gid) is not None and parse_int(gid) >= 0:
        found += _lint_gid(gid, facts)
    return found


def _lint_socket_ifname(value: str, facts: NetFacts, have: str) -> list[Finding]:
    shown = f"NCCL_SOCKET_IFNAME={value}"
    spec = parse_nccl_list(value)
    found = []
    if not spec.exclude:
        how = "named" if spec.exact else "starting with"
        for token, _ in spec.tokens:
            if not any((i.name == token) if spec.exact else i.name.startswith(token)
                       for i in facts.interfaces):
                found.append(Finding("env-no-such-iface", "error", "NCCL_SOCKET_IFNAME",
                                     f"{shown}: no interface {how} {token} on this host "
                                     f"(interfaces: {have})",
                                     "name this host's interface (ip addr), or unset it to "
                                     "let meshrun pick the one routing to the master"))
    chosen = [i for i in facts.interfaces if spec.selects(i.name)]
    if not chosen:
        if spec.exclude:
            found.append(Finding("env-no-such-iface", "error", "NCCL_SOCKET_IFNAME",
                                 f"{shown} excludes every interface of this host ({have})",
                                 "exclude fewer interfaces, or unset it"))
        return found
    if all(i.state == "down" for i in chosen):
        found.append(Finding("env-iface-unusable", "warning", "NCCL_SOCKET_IFNAME",
                             f"{shown} selects only interfaces that are down "
                             f"({', '.join(i.name for i in chosen)})",
                             "select an interface that is up (ip link)"))
    elif facts.addresses_known and not any(i.addresses for i in chosen):
        found.append(Finding("env-iface-unusable", "warning", "NCCL_SOCKET_IFNAME",
                             f"{shown} selects only interfaces without an IP address "
                             f"({', '.join(i.name for i in chosen)})",
                             "select an interface with an address (ip addr)"))
    return found


def _lint_hca(value: str, facts: NetFacts) -> list[Finding]:
    shown = f"NCCL_IB_HCA={value}"
    try:
        spec = parse_nccl_list(value, ports=True)
    except ValueError as exc:
        return [Finding("env-bad-value", "error", "NCCL_IB_HCA", f"{shown}: {exc}",
                        "write devices as NAME or NAME:PORT, e.g. =mlx5_0:1")]
    ports = [(d, p) for d in facts.ib_devices for p in d.ports]
    listing = ", ".join(f"{d.name} {p.describe()}" for d, p in ports) or "none"
    fix = ("list this host's devices (ibv_devices, ibstat), or unset NCCL_IB_HCA to let "
           "meshrun list the active ports")
    if not spec.exclude:
        missing = [f"{token}:{port}" if port is not None else token
                   for token, port in spec.tokens
                   if not any(((d.name == token) if spec.exact else d.name.startswith(token))
                              and (port is None or p.number == port) for d, p in ports)]
        if missing:
            how = "named" if spec.exact else "starting with"
            return [Finding("env-no-such-hca", "error", "NCCL_IB_HCA",
                            f"{shown}: this host has no RDMA device {how} {', '.join(missing)} "
                            f"(RDMA ports: {listing})", fix)]
    if facts.active_ib_ports and not any(spec.selects(d.name, p.number)
                                         for d, p in facts.active_ib_ports):
        return [Finding("env-no-such-hca", "error", "NCCL_IB_HCA",
                        f"{shown} selects no active port (RDMA ports: {listing}): NCCL falls "
                        "back to TCP sockets", fix)]
    return []


def _lint_gid(value: str, facts: NetFacts) -> list[Finding]:
    index = int(value)
    roce = [(d, p) for d, p in facts.active_ib_ports if p.roce]
    if not roce:
        return [Finding("env-gid-index", "info", "NCCL_IB_GID_INDEX",
                        f"NCCL_IB_GID_INDEX={value} only matters on RoCE ports; this host's "
                        f"active ports are InfiniBand ({ports_text(facts.active_ib_ports)})",
                        "remove it")]
    found = []
    for d, p in roce:
        gid = next((g for g in p.gids if g.index == index), None)
        best = roce_v2_gid_index(p, facts.route_source_addr)
        suggestion = f"set NCCL_IB_GID_INDEX={best}, " if best is not None else ""
        if gid is None:
            found.append(Finding("env-gid-index", "error", "NCCL_IB_GID_INDEX",
                                 f"NCCL_IB_GID_INDEX={value}: {d.name}:{p.number} has no GID "
                                 f"at index {index}", f"{suggestion}or unset it (NCCL >= "
                                                      "2.21 selects the GID itself)"))
        elif not gid.roce_v2 and gid.type:
            found.append(Finding("env-gid-index", "warning", "NCCL_IB_GID_INDEX",
                                 f"NCCL_IB_GID_INDEX={value}: GID {index} of {d.name}:"
                                 f"{p.number} is {gid.type}, not RoCE v2 (routable)",
                                 f"{suggestion}or unset it (NCCL >= 2.21 selects the GID "
                                 "itself)"))
    return found


def format_findings(findings: Iterable[Finding]) -> str:
    """One line per finding, errors first (for ``meshrun doctor`` / preflight output)."""
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return "\n".join(f.line() for f in sorted(findings, key=lambda f: order[f.severity]))


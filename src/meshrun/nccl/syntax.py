"""NCCL's list syntax for ``NCCL_SOCKET_IFNAME`` and ``NCCL_IB_HCA``: prefixes, ``=`` for
exact names, ``^`` to exclude, ``:port`` on HCAs. Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..facts.net import NetFacts


@dataclass(frozen=True)
class NcclList:
    """A parsed NCCL_SOCKET_IFNAME / NCCL_IB_HCA value: ``[^][=]name[:port],...``.

    ``^`` makes it an exclude list; ``=`` makes every token an exact name (otherwise
    each token is a prefix: ``mlx5_1`` also selects ``mlx5_10``).
    """

    exclude: bool
    exact: bool
    tokens: tuple[tuple[str, int | None], ...]

    def matches(self, name: str, port: int | None = None) -> bool:
        """True when some token names ``name`` (and ``port``, if the token has one)."""
        for token, token_port in self.tokens:
            hit = name == token if self.exact else name.startswith(token)
            if hit and (token_port is None or port is None or token_port == port):
                return True
        return False

    def selects(self, name: str, port: int | None = None) -> bool:
        """Whether NCCL would use ``name`` (``port``) under this list."""
        return self.matches(name, port) != self.exclude


def parse_nccl_list(text: str, *, ports: bool = False) -> NcclList:
    """Parse NCCL's interface/HCA list syntax; ValueError on a malformed port."""
    value = text.strip()
    exclude = value.startswith("^")
    value = value[1:] if exclude else value
    exact = value.startswith("=")
    value = value[1:] if exact else value
    tokens: list[tuple[str, int | None]] = []
    for raw in value.split(","):
        raw = raw.strip()
        if not raw:
            continue
        port = None
        if ports and ":" in raw:
            raw, _, port_text = raw.partition(":")
            if not port_text.isdigit():
                raise ValueError(f"port {port_text!r} of {raw} is not a number")
            port = int(port_text)
        tokens.append((raw, port))
    return NcclList(exclude, exact, tuple(tokens))


def selects(text: str, name: str) -> bool:
    try:
        return parse_nccl_list(text).selects(name)
    except ValueError:
        return False


def hca_selection(text: str, facts: NetFacts) -> set[tuple[str, int]]:
    """The active ports NCCL would use under an NCCL_IB_HCA value."""
    try:
        spec = parse_nccl_list(text, ports=True)
    except ValueError:
        return set()
    return {(d.name, p.number) for d, p in facts.active_ib_ports if spec.selects(d.name, p.number)}


# --- values as NCCL reads them ---------------------------------------------------------------

def parse_int(text: str) -> int | None:
    """An integer as NCCL reads it (strtoll base 0: ``16777216``, ``0x1000000``), or None."""
    text = text.strip()
    for base in (0, 10):
        try:
            return int(text, base)
        except ValueError:
            continue
    return None


def parse_float(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def split_names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]

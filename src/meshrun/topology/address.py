"""Host addresses and ``host:port`` endpoints, IPv6 included. Pure string work, no DNS.

A master address is stored *bare* (``fd00::1``, never ``[fd00::1]``): that is what
``getaddrinfo`` and torch's ``TCPStore`` take (``TCPStore("[::1]", ...)`` looks up the
name ``[::1]`` and never connects). Users may write an IPv6 address either way.

An endpoint is read as torch's ``parse_rendezvous_endpoint`` reads ``--rdzv-endpoint``:
``[fd00::1]:29400``, ``[fd00::1]``, ``10.0.0.1:29400``, ``node-0:29400``, ``node-0``. torch
splits an unbracketed IPv6 address at its last colon (``fd00::1`` becomes host ``fd00:``,
port 1); meshrun instead reads a string with several colons by the one reading that makes
sense: ``fd00::1`` is an address without a port, ``fd00::1:29400`` is ``fd00::1`` with port
29400 (``1:29400`` is no IPv6 group). Where both readings make sense (``fd00::1:2``) it
refuses and asks for ``[addr]:port``. Printing goes the other way: :func:`join_host_port`
brackets an IPv6 host (``[fd00::1]:29400``), which torch and meshrun both read back.
"""

from __future__ import annotations

import ipaddress
import re

from ..errors import UsageError

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_PORT = re.compile(r"^[0-9]{1,5}$")


def is_ipv6(text: str) -> bool:
    """Whether ``text`` is a bare IPv6 address (``fd00::1``, ``fe80::1%eth0``)."""
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def unbracket(text: str) -> str:
    """``[fd00::1]`` -> ``fd00::1``; anything else unchanged (the planner judges it)."""
    text = text.strip()
    if len(text) > 2 and text[0] == "[" and text[-1] == "]" and is_ipv6(text[1:-1]):
        return text[1:-1]
    return text


NOT_A_HOST = "is not a host name or IP address"
HAS_PORT = "includes a port"
BAD_LABELS = ("is not a host name: each dot-separated part must have 1 to 63 characters, "
              "253 in all (a name lookup refuses it)")


def host_problem(text: str) -> str:
    """Why ``text`` is no usable bare host (name, IPv4 or IPv6 address): :data:`HAS_PORT`,
    :data:`NOT_A_HOST`, or "" when it is one."""
    if "://" in text:
        return NOT_A_HOST
    if ":" in text:
        if is_ipv6(text):
            return ""
        head, _, tail = text.rpartition(":")
        if text.count(":") == 1 or (is_ipv6(unbracket(head)) and _PORT.match(tail)):
            return HAS_PORT
        return NOT_A_HOST
    if not _NAME.match(text):
        return NOT_A_HOST
    labels = (text[:-1] if text.endswith(".") else text).split(".")  # a trailing dot: FQDN
    return "" if len(text) <= 253 and all(0 < len(label) <= 63 for label in labels) \
        else BAD_LABELS


def is_loopback(host: str) -> bool:
    """``host`` is this machine's loopback (a name is not looked up: only ``localhost``)."""
    if unbracket(host).lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(unbracket(host)).is_loopback
    except ValueError:
        return False


def join_host_port(host: str, port: int | str) -> str:
    """``host:port``, with an IPv6 host in brackets: ``[fd00::1]:29400``."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def split_endpoint(text: str, name: str) -> tuple[str, int | None]:
    """``host[:port]`` from variable ``name`` -> (bare host, port or None); one clear line on
    a malformed or ambiguous value (see the module doc)."""
    raw = text.strip()
    fix = "write [addr]:port for an IPv6 address, e.g. [fd00::1]:29400, or host:port"
    if raw.startswith("["):
        inside, sep, rest = raw[1:].partition("]")
        if not sep or not is_ipv6(inside) or (rest and not rest.startswith(":")):
            raise UsageError(f"{name}={raw!r} is not an endpoint: brackets must hold an IPv6 "
                             "address, optionally followed by :port", subject=name, hint=fix,
                             code="bad-endpoint")
        return inside, (_port(rest[1:], raw, name) if rest else None)
    if raw.count(":") <= 1:
        host, sep, port = raw.partition(":")
        if not host:
            raise UsageError(f"{name}={raw!r} has no host before the port", subject=name,
                             hint="write host:port, e.g. node-0:29400", code="bad-endpoint")
        return host, (_port(port, raw, name) if sep else None)
    # Several colons and no brackets: an IPv6 address, alone or followed by :port.
    head, _, tail = raw.rpartition(":")
    whole = is_ipv6(raw)
    split = is_ipv6(head) and bool(_PORT.match(tail)) and 1 <= int(tail) <= 65535
    if whole and split:
        raise UsageError(f"{name}={raw!r} is ambiguous: the IPv6 address {raw} without a port, "
                         f"or {head} with port {tail}", subject=name,
                         hint=f"write [addr]:port, e.g. [{head}]:{tail}, or [{raw}] for an "
                              "address alone", code="bad-endpoint")
    if whole:
        return raw, None
    if split:
        return head, int(tail)
    raise UsageError(f"{name}={raw!r} is neither host:port nor an IPv6 address", subject=name,
                     hint=fix, code="bad-endpoint")


def _port(text: str, raw: str, name: str) -> int:
    if not _PORT.match(text) or not 1 <= int(text) <= 65535:
        what = (f"has the port {text!r}, not one in 1..65535" if text
                else "ends in ':' without a port")
        raise UsageError(f"{name}={raw!r} {what}", subject=name,
                         hint="write host:port with a port in 1..65535, e.g. node-0:29400 or "
                              "[fd00::1]:29400, or leave out the ':'", code="bad-endpoint")
    return int(text)

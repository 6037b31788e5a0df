"""The job's store protocol (meshrun.protocol): payloads survive the round trip, no caller
builds a key of its own, and docs/architecture.md lists every key."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from meshrun import protocol

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value", [
    protocol.NodeClaim("gpu-a.example", 4242, "a1b2c3d4"),
    protocol.NodeClaim("fd00::1", 7, "ffff0000"),
    protocol.Progress(120, 1764000000.25),
    protocol.Endpoint("fd00::1", 29400),
    protocol.Endpoint("10.0.0.1", 1),
    protocol.Probe(((3, "stopped"), (5, "no stack dump")), 2),
    protocol.Probe(),
    protocol.HangVerdict("meshrun: job hung: ...", ((3, 0, "gpu-a"),), True),
    protocol.Watch(17, ((2, 15.5),), {1: "done", 3: "failed"}),
    protocol.Watch(1),
])
def test_payloads_round_trip(value):
    encoded = value.encode()
    assert type(value).decode(encoded) == value
    assert type(value).decode(encoded.encode()) == value  # as the store returns it: bytes


def test_a_claim_reads_as_a_person_would():
    claim = protocol.NodeClaim.decode(b"gpu-a pid 4242 a1b2c3d4")
    assert (claim.host, claim.pid, claim.who()) == ("gpu-a", 4242, "gpu-a pid 4242")


def _string_constants(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs]


@pytest.mark.parametrize("package", ["runtime", "worker", "reports", "cli"])
def test_no_caller_builds_a_store_key(package):
    for path in sorted((ROOT / "src" / "meshrun" / package).rglob("*.py")):
        for line, value in _string_constants(path):
            assert "meshrun/" not in value, f"{path.relative_to(ROOT)}:{line}: {value!r}"


def test_the_architecture_doc_lists_every_key():
    table = (ROOT / "docs" / "architecture.md").read_text()
    documented = set(re.findall(r"`(meshrun/[^`]+)`", table))
    module = set(re.findall(r"``(meshrun/[^`]+)``", protocol.__doc__))
    assert module <= documented, sorted(module - documented)


def test_a_cause_round_trips_and_a_bad_value_is_named():
    cause = protocol.Cause(1, 1, "gpu-b", "exited with code 1", "ValueError: bad batch")
    assert protocol.Cause.decode(cause.encode()) == cause
    assert cause.lead("this node's workers were stopped") == (
        "meshrun: the job failed because rank 1 on node 1 (gpu-b) exited with code 1: "
        "ValueError: bad batch; this node's workers were stopped")
    assert protocol.Cause(3, 2, "h", "was killed by SIGKILL", "").lead("x") == (
        "meshrun: the job failed because rank 3 on node 2 (h) was killed by SIGKILL; x")
    for bad in (b"\xff\xfe", b"{}", b'{"rank": "one", "node": 1, "host": "h", "how": "",'
                b' "line": ""}', b"[1, 2]"):
        with pytest.raises(ValueError, match="not a cause record"):
            protocol.Cause.decode(bad)

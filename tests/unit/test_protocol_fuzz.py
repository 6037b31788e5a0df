"""The control plane's decoders under fuzz (issue 21): whatever a stranger writes into the
job's store or sends to node 0's liveness-links port, meshrun's readers either get a value
or a ValueError they name ("which is no meshrun value"), never another exception that
would take a watchdog down, and node 0's links hub never takes a stranger's bytes for a
node's link, goodbye or death.

Inputs: arbitrary bytes and text, and every valid encoding cut short at each point or with
one byte changed (the values a half-written or corrupted key holds)."""

from __future__ import annotations

import socket
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshrun import protocol
from meshrun.runtime import links
from meshrun.runtime.events import Goodbye
from meshrun.runtime.membership import Membership
from meshrun.runtime.preflight import Verdict


class _VerdictValue:
    """The preflight verdict as node 0 writes it (JSON) and every other node reads it."""

    @staticmethod
    def decode(raw):
        import json

        return Verdict.from_json(json.loads(protocol.text(raw)))

DECODERS = [protocol.Cause, protocol.NodeClaim, protocol.Progress, protocol.Endpoint,
            protocol.Probe, protocol.HangVerdict, protocol.Heartbeat, protocol.Watch,
            Membership, _VerdictValue]
VALID = [
    protocol.Progress(120, 1764000000.25, 0.5, 0.25, 10),
    protocol.Endpoint("fd00::1", 29400),
    protocol.Probe(((3, "stopped"), (5, "no stack dump")), 2),
    protocol.HangVerdict("meshrun: job hung: ...", ((3, 0, "gpu-a"),), True),
    protocol.Watch(17, ((2, 15.5),), {1: "done", 3: "failed"}),
]
CASES = 300   # per decoder and strategy (docs/security.md counts them)


def _decodes_or_names_it(decoder, raw) -> None:
    try:
        decoder.decode(raw)
    except ValueError:
        pass   # named as "no meshrun value" by its reader


@pytest.mark.parametrize("decoder", DECODERS, ids=lambda d: d.__name__)
@settings(max_examples=CASES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.one_of(st.binary(max_size=300), st.text(max_size=300)))
def test_any_value_decodes_or_is_a_value_error(decoder, raw):
    _decodes_or_names_it(decoder, raw)


@pytest.mark.parametrize("decoder", DECODERS, ids=lambda d: d.__name__)
@settings(max_examples=CASES, deadline=None)
@given(data=st.data())
def test_a_cut_or_changed_valid_value_decodes_or_is_a_value_error(decoder, data):
    valid = [v for v in VALID if isinstance(v, decoder)]
    source = (valid[0].encode() if valid else
              data.draw(st.sampled_from([v.encode() for v in VALID]))).encode()
    at = data.draw(st.integers(0, len(source)))
    byte = data.draw(st.integers(0, 255))
    _decodes_or_names_it(decoder, source[:at])                                  # cut short
    _decodes_or_names_it(decoder, source[:at] + bytes([byte]) + source[at + 1:])  # changed


@settings(max_examples=CASES, deadline=None)
@given(raw=st.binary(max_size=64))
def test_any_goodbye_reads_as_one_or_as_text(raw):
    said = Goodbye.read(raw)
    assert isinstance(said, (Goodbye, str))


@pytest.fixture(scope="module")
def hub():
    """Node 0's hub with node 1's real link open (its claim's token), as in a job."""
    h = links.Hub("127.0.0.1", tokens={1: "tok1"})
    h.start()
    real = links.Link("127.0.0.1", h.port, 1, token="tok1")
    real.start()
    deadline = time.monotonic() + 5
    while h.linked() != {1} and time.monotonic() < deadline:
        time.sleep(0.01)
    assert h.linked() == {1}
    yield h
    real.close("d")
    h.close("d")


@settings(max_examples=CASES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.one_of(
    st.binary(max_size=40),                                           # anything
    st.builds(lambda r, t, rest: links._HEADER.pack(r, t) + rest,     # a header's shape
              st.sampled_from([0, 1, 2, 2**32 - 1]), st.binary(min_size=8, max_size=8),
              st.binary(max_size=8))))
def test_a_strangers_bytes_on_the_links_port_never_speak_for_a_node(hub, first):
    with socket.create_connection(("127.0.0.1", hub.port), timeout=2) as s:
        s.sendall(first)
    assert hub.is_alive()
    assert hub.linked() == {1}                   # node 1's real link is still the one
    assert 1 not in hub.died and 1 not in hub.goodbyes


def test_after_the_fuzz_the_real_link_still_reports_its_goodbye(hub):
    """The hub, after every stranger above: node 1's own goodbye still arrives."""
    sock = socket.create_connection(("127.0.0.1", hub.port), timeout=2)
    sock.sendall(links._HEADER.pack(2, links.token_bytes("tok2")))
    hub.expect(2, "tok2")
    deadline = time.monotonic() + 8
    while 2 not in hub.linked() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert 2 in hub.linked()
    sock.sendall(b"d")
    deadline = time.monotonic() + 5
    while hub.said().get(2) != "d" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert hub.said().get(2) == "d"
    sock.close()


def test_a_foreign_value_met_while_joining_or_comparing_is_one_line_not_a_traceback():
    """The preflight verdict (or any value the decoders refuse) read during the start-up
    steps: one StartupError naming the step and that something else writes to the store."""
    from meshrun.errors import StartupError
    from meshrun.harness import clean_env
    from meshrun.runtime.planning import plan_here
    from meshrun.runtime.store import store_errors
    from meshrun.topology import Flags

    plan = plan_here(clean_env(), Flags(nnodes="2", node_rank="1", master_addr="127.0.0.1",
                                        master_port="29400"))
    with pytest.raises(StartupError) as raised:
        with store_errors(plan, 29400, "comparing the nodes (preflight)"):
            _VerdictValue.decode(b'{"differences": 3}')
    line = raised.value.line()
    assert "[store-foreign-value]" in line and "while comparing the nodes" in line
    assert "no meshrun value" in line and "not a preflight verdict" in line


# -- signed values (the job token, meshrun/signing.py) --------------------------------------

@settings(max_examples=CASES, deadline=None)
@given(raw=st.one_of(st.binary(max_size=300), st.text(max_size=300)), data=st.data())
def test_a_reader_with_a_token_takes_no_value_it_did_not_sign(raw, data):
    """Whatever bytes a stranger writes, and any signed value cut short or with one byte
    changed, a reader with the job token ignores it (Ignored, counted), never takes it, and
    raises nothing else; what its store hands on is a text no decoder takes."""
    from meshrun.signing import IGNORED, Ignored, Signer, Verifier, _mark

    signer = Signer("a-job-token-of-some-length", "run", "nonce")
    key = protocol.WATCH
    for value in (raw, _changed(signer.sign(key, protocol.Watch(3).encode()).encode(), data)):
        if value is None:
            continue
        try:
            Verifier(signer).open(key, value)
        except Ignored as exc:
            mark = _mark(exc, value)
            assert mark.startswith(IGNORED)
            for decoder in DECODERS:   # a claim's readers ask signing.ignored() first
                if decoder is not protocol.NodeClaim:
                    with pytest.raises((ValueError, *protocol.BAD_VALUE)):
                        decoder.decode(mark)
        else:
            raise AssertionError(f"took an unsigned or changed value: {value!r}")


def _changed(signed: bytes, data) -> bytes | None:
    at = data.draw(st.integers(0, len(signed)))
    byte = data.draw(st.integers(0, 255))
    changed = signed[:at] + bytes([byte]) + signed[at + 1:]
    if data.draw(st.booleans()):
        return signed[:at] if at < len(signed) else None   # cut short
    return None if changed == signed else changed

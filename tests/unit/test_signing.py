"""The job token (meshrun.signing): values signed, checked, replays caught, strangers
ignored and said once; against torch's real TCPStore."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import pytest

from meshrun import protocol
from meshrun.errors import UsageError
from meshrun.harness import free_port
from meshrun.signing import (
    Ignored,
    SignedStore,
    Signer,
    Signing,
    Verifier,
    ignored,
    new_token,
    tallied,
    tally,
    token_from,
)

TOKEN = "a-job-token-of-some-length-0123456789"
RUN = "run-42"
WATCH = protocol.WATCH


def reason(verifier: Verifier, key: str, raw: bytes | str) -> str:
    with pytest.raises(Ignored) as caught:
        verifier.open(key, raw)
    return caught.value.reason


def test_a_signed_value_opens_to_its_payload():
    signer = Signer(TOKEN, RUN)
    value = signer.sign(WATCH, "lost 3")
    assert value.startswith("ms1:")
    _, seq, mac, payload = value.split(":", 3)
    assert seq.isdigit() and len(mac) == 32 and payload == "lost 3"
    assert Verifier(Signer(TOKEN, RUN)).open(WATCH, value.encode()) == "lost 3"


def test_a_payload_with_colons_and_newlines_comes_back_whole():
    payload = 'a:b::c\n{"x": "1:2"}\n\nend:'
    signer = Signer(TOKEN, RUN)
    assert Verifier(signer).open(WATCH, signer.sign(WATCH, payload)) == payload


@pytest.mark.parametrize("writer,key", [
    (Signer("another-token-0123456789", RUN), WATCH),
    (Signer(TOKEN, "run-43"), WATCH),
    (Signer(TOKEN, RUN), protocol.heartbeat_key(1)),
], ids=["another token", "another run id", "another key"])
def test_a_value_from_another_token_run_or_key_is_mis_signed(writer, key):
    assert reason(Verifier(Signer(TOKEN, RUN)), WATCH, writer.sign(key, "x")) == "mis-signed"


def test_a_changed_payload_or_seq_is_mis_signed():
    signer = Signer(TOKEN, RUN)
    _, seq, mac, payload = signer.sign(WATCH, "lost 3").split(":", 3)
    verifier = Verifier(signer)
    assert reason(verifier, WATCH, f"ms1:{seq}:{mac}:lost 2") == "mis-signed"
    assert reason(verifier, WATCH, f"ms1:{int(seq) + 1}:{mac}:{payload}") == "mis-signed"
    assert reason(verifier, WATCH, f"ms1:0{seq}:{mac}:{payload}") == "mis-signed"
    assert reason(verifier, WATCH, f"ms1:{seq}:{mac[:-1]}é:{payload}") == "mis-signed"
    assert reason(verifier, WATCH, "ms1:garbage") == "mis-signed"


@pytest.mark.parametrize("raw", [b"lost 3", b"", b"\xff\xfe ms1:", "1.5"])
def test_a_plain_value_or_one_that_is_no_text_is_unsigned(raw):
    assert reason(Verifier(Signer(TOKEN, RUN)), WATCH, raw) == "unsigned"


def test_an_earlier_value_written_again_is_replayed_the_same_read_twice_is_not():
    signer = Signer(TOKEN, RUN)
    verifier = Verifier(Signer(TOKEN, RUN))
    old, new = signer.sign(WATCH, "beat 1"), signer.sign(WATCH, "beat 2")
    assert verifier.open(WATCH, old) == "beat 1"
    assert verifier.open(WATCH, new) == "beat 2"
    assert verifier.open(WATCH, new) == "beat 2"   # readers poll: the same value again
    assert reason(verifier, WATCH, old) == "replayed"
    # the replay rule is per key: an old value of another key is not compared with this one
    assert verifier.open(protocol.heartbeat_key(0), signer.sign(protocol.heartbeat_key(0), "b"))


def test_seq_grows_even_when_the_clock_steps_back(monkeypatch):
    clock = iter([5_000, 4_000, 4_000, 1, 6_000, 6_000])
    monkeypatch.setattr(time, "time_ns", lambda: next(clock))
    signer = Signer(TOKEN, RUN)
    seqs = [int(signer.sign(WATCH, "x").split(":")[1]) for _ in range(6)]
    assert seqs == [5_000, 5_001, 5_002, 5_003, 6_000, 6_001]


def test_a_reader_signs_above_what_it_accepted(monkeypatch):
    # a node back as a new process, on a host whose clock is behind, still writes over
    # its old value once it has read it
    ahead = Signer(TOKEN, RUN).sign(WATCH, "old")
    monkeypatch.setattr(time, "time_ns", lambda: 1)
    signer = Signer(TOKEN, RUN)
    verifier = Verifier(signer)
    verifier.open(WATCH, ahead)
    assert verifier.open(WATCH, signer.sign(WATCH, "new")) == "new"


def test_ignored_values_are_said_once_then_at_each_tenfold():
    verifier = Verifier(Signer(TOKEN, RUN))
    assert verifier.news() == []
    reason(verifier, WATCH, "forged 0")
    reason(verifier, WATCH, "forged 0")   # the same value read again counts once
    assert verifier.news() == [
        "meshrun: ignored 1 unsigned write to meshrun/watch (the job token is set; "
        "something without it writes to this job's store)"]
    assert verifier.news() == []
    for n in range(1, 9):
        reason(verifier, WATCH, f"forged {n}")
    assert verifier.news() == []          # 9: not yet ten
    for n in range(9, 12):
        reason(verifier, WATCH, f"forged {n}")
    assert verifier.news() == [
        "meshrun: ignored 12 unsigned writes to meshrun/watch (the job token is set; "
        "something without it writes to this job's store)"]
    for n in range(12, 99):
        reason(verifier, WATCH, f"forged {n}")
    assert verifier.news() == []          # 99: the next line is at 100
    reason(verifier, WATCH, Signer("another-token-0123456789", RUN).sign(WATCH, "x"))
    assert verifier.news() == ["meshrun: ignored 1 mis-signed write to meshrun/watch "
                               "(signed with another token, or changed)"]
    signer = Signer(TOKEN, RUN)
    old, new = signer.sign(WATCH, "a"), signer.sign(WATCH, "b")
    verifier.open(WATCH, new)
    reason(verifier, WATCH, old)
    assert verifier.news() == ["meshrun: ignored 1 replayed write to meshrun/watch "
                               "(an earlier value written again)"]


def test_memory_is_bounded():
    signer = Signer(TOKEN, RUN)
    verifier = Verifier(signer)
    for n in range(1500):
        key = protocol.progress_key(n)
        verifier.open(key, signer.sign(key, "1"))
        reason(verifier, key, "forged")
    assert len(verifier.counts()) == 1000
    assert (protocol.progress_key(1499), "unsigned") in verifier.counts()
    assert (protocol.progress_key(0), "unsigned") not in verifier.counts()
    assert len(verifier.news()) == 1000
    # the highest seq of every validly signed key is kept (only the token's holder adds one,
    # and a key forgotten while polled in turn would lose its replay check), up to its own bound
    assert "keys=1500" in repr(verifier)
    small = Verifier(signer, remember_seqs=10)
    for n in range(20):
        key = protocol.progress_key(n)
        small.open(key, signer.sign(key, "1"))
    assert "keys=10" in repr(small)


def test_repr_shows_neither_the_token_nor_the_key():
    signer = Signer(TOKEN, RUN)
    for text in (repr(signer), repr(Verifier(signer)), repr(SignedStore(None, signer))):
        assert TOKEN not in text and signer._key.hex() not in text and RUN in text
    assert not hasattr(signer, "token") and not hasattr(signer, "__dict__")


# -- against torch's real store -------------------------------------------------------------

@pytest.fixture(scope="module")
def tcp_store():
    from torch.distributed import TCPStore

    return TCPStore("127.0.0.1", free_port(), is_master=True, wait_for_workers=False,
                    timeout=timedelta(seconds=5))


@pytest.fixture
def node(tcp_store):
    def make() -> SignedStore:
        return SignedStore(tcp_store, Signer(TOKEN, RUN))
    return make


def test_signed_values_round_trip_through_a_real_store(tcp_store, node):
    writer, reader = node(), node()
    writer.set(protocol.heartbeat_key(0), "beat 7")
    writer.multi_set([protocol.heartbeat_key(1), WATCH], ["beat 8", 'a:b\n{"c": 1}'])
    assert tcp_store.get(protocol.heartbeat_key(0)).startswith(b"ms1:")
    assert reader.get(protocol.heartbeat_key(0)) == b"beat 7"
    assert reader.multi_get([protocol.heartbeat_key(1), WATCH]) == [b"beat 8", b'a:b\n{"c": 1}']
    assert reader.check([WATCH]) and not reader.check([protocol.heartbeat_key(99)])
    reader.wait([WATCH], timedelta(seconds=1))


def test_a_forged_value_in_a_real_store_is_ignored(tcp_store, node):
    writer, reader = node(), node()
    writer.set(protocol.heartbeat_key(2), "beat 1")
    tcp_store.set(protocol.hang_seen_key(0), "watch: node 1 lost")   # a stranger's write
    got = reader.get(protocol.hang_seen_key(0))
    assert ignored(got) and got == b"<ignored unsigned value: 'watch: node 1 lost'>"
    forged, beat = reader.multi_get([protocol.hang_seen_key(0), protocol.heartbeat_key(2)])
    assert ignored(forged) and beat == b"beat 1" and not ignored(beat)
    for decode in (protocol.Watch.decode, protocol.Heartbeat.decode, protocol.Progress.decode,
                   protocol.Endpoint.decode, protocol.Cause.decode, protocol.Probe.decode):
        with pytest.raises((ValueError, *protocol.BAD_VALUE)):   # no reader takes it
            decode(got)
    assert reader.verifier.news() == [
        "meshrun: ignored 1 unsigned write to meshrun/hang_seen/0 (the job token is set; "
        "something without it writes to this job's store)"]


def test_keys_outside_meshrun_pass_through_and_counters_are_refused(tcp_store, node):
    store = node()
    store.set("torchelastic/x", "plain")
    assert tcp_store.get("torchelastic/x") == b"plain"
    assert store.get("torchelastic/x") == b"plain"
    assert store.multi_get(["torchelastic/x"]) == [b"plain"]
    assert store.add("torchelastic/count", 2) == 2
    assert store.compare_set("torchelastic/first", "", "me") == b"me"
    with pytest.raises(TypeError, match="a counter cannot be signed: use tally"):
        store.add(protocol.JOINED, 1)
    # torch's agent keeps its own keys under a round's prefix: never signed
    store.set(protocol.round_prefix(3) + "torchelastic/agent/x", "plain")
    assert tcp_store.get(protocol.round_prefix(3) + "torchelastic/agent/x") == b"plain"
    store.set(protocol.round_workers_key(3), "h 1")
    assert tcp_store.get(protocol.round_workers_key(3)).startswith(b"ms1:")


def test_a_counter_counts_only_the_nodes_whose_signed_mark_is_there(tcp_store, node):
    """Issue 21: one ``add`` on a round's arrivals made a round look complete. With a token
    the counter is a hint; the nodes counted are those whose signed mark is there."""
    key = protocol.round_arrived_key(7)
    a, b = node(), node()
    assert tally(a, key, 0) == 1
    assert tallied(b, key, [0, 1], need=2) == 1          # below the need: the counter alone
    tcp_store.add(key, 1)                                 # a stranger's add
    assert tallied(b, key, [0, 1], need=2) == 1           # at the need: the marks decide
    tcp_store.set(protocol.mark_key(key, 1), "1")         # and a forged mark
    assert tallied(b, key, [0, 1], need=2) == 1
    assert tally(a, key, 1) == 3
    assert tallied(b, key, [0, 1], need=2) == 2
    news = b.verifier.news()
    assert "meshrun: ignored 1 unsigned write to meshrun/round/7/arrived/by/1 (the job token is " \
        "set; something without it writes to this job's store)" in news
    assert any(line.startswith("meshrun: ignored 2 unsigned writes to meshrun/round/7/arrived ")
               for line in news), news                   # the adds, counted once per value
    # a plain store (no token): the counter, as before
    plain = protocol.round_arrived_key(8)
    assert tally(tcp_store, plain, 0) == 1 and tallied(tcp_store, plain, [0, 1], 2) == 1


def test_a_writer_whose_clock_is_behind_catches_up_with_the_key_before_it_writes(
        tcp_store, monkeypatch):
    """Node 0 writes each rank's first (empty) progress; a worker on a host whose clock is
    behind node 0's signs lower sequence numbers, which node 0 would take for replays.
    Reading the key first (catch_up), it signs above what is there."""
    import meshrun.signing as signing

    key = protocol.progress_key(77)
    node0 = SignedStore(tcp_store, Signer(TOKEN, RUN))
    node0.set(key, "")
    assert node0.get(key) == b""                                  # node 0 has taken it
    behind = SignedStore(tcp_store, Signer(TOKEN, RUN))
    monkeypatch.setattr(signing.time, "time_ns", lambda: 1000)    # a clock far behind
    behind.set(key, "5 1.0")
    assert ignored(node0.get(key))                                # read as a replay
    node0.set(key, "")                                            # as it is at the start
    signing.catch_up(behind, [key, protocol.progress_key(78)])    # (78: absent, skipped)
    behind.set(key, "6 2.0")
    assert node0.get(key) == b"6 2.0"
    signing.catch_up(tcp_store, [key])                            # a plain store: nothing


def test_a_liveness_link_s_proof_needs_the_job_token():
    """A link carries an HMAC of its claim's token (anyone reading the store reads the
    claim): another rank, claim, token or launch gives another proof."""
    signing = Signing(Signer(TOKEN, RUN, nonce="n1"))
    proof = signing.link_token(1, "abcd1234")
    assert len(proof) == 8 and proof == signing.link_token(1, "abcd1234")
    assert proof not in {signing.link_token(2, "abcd1234"), signing.link_token(1, "abcd1235"),
                         Signing(Signer(TOKEN + "x", RUN, nonce="n1")).link_token(1, "abcd1234"),
                         Signing(Signer(TOKEN, RUN, nonce="n2")).link_token(1, "abcd1234")}
    worker = Signer.from_key(signing.signer.key_hex, RUN)       # a worker's, from MESHRUN_JOB_KEY
    value = worker.sign(protocol.progress_key(0), "3 1.0")
    assert Verifier(signing.signer).open(protocol.progress_key(0), value) == "3 1.0"


def test_compare_set_first_signed_writer_wins(tcp_store, node):
    a, b = node(), node()
    key = protocol.cause_key(0)
    assert a.compare_set(key, "", "cause A") == b"cause A"
    assert b.compare_set(key, "", "cause B") == b"cause A"
    assert b.get(key) == b"cause A"
    # a stranger's value there first holds nothing: the first signed writer replaces it
    key = protocol.cause_key(1)
    tcp_store.set(key, "forged cause")
    assert b.compare_set(key, "", "cause B") == b"cause B"
    assert a.compare_set(key, "", "cause A") == b"cause B"
    # with the raw value it holds as ``expected``, a signed value is replaced
    assert a.compare_set(key, tcp_store.get(key).decode(), "cause A") == b"cause A"
    assert b.get(key) == b"cause A"


# -- the token ---------------------------------------------------------------------------

def token_file(tmp_path, text: str, mode: int) -> str:
    path = tmp_path / "token"
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)


def test_the_token_comes_from_the_variable_or_a_private_file(tmp_path):
    assert token_from({}, None) is None
    assert token_from({"MESHRUN_JOB_TOKEN": TOKEN}, None) == TOKEN
    path = token_file(tmp_path, TOKEN + "\n", 0o600)
    assert token_from({"MESHRUN_JOB_TOKEN": "x" * 20}, path) == TOKEN
    assert token_from({}, token_file(tmp_path, TOKEN + "\n\n", 0o400)) == TOKEN + "\n"
    assert len(new_token()) >= 40 and new_token() != new_token()


@pytest.mark.parametrize("case,words", [
    ("empty variable", ["MESHRUN_JOB_TOKEN is empty", "fix:"]),
    ("short variable", ["MESHRUN_JOB_TOKEN holds 6 characters, fewer than 16", "fix:"]),
    ("empty file", ["--token-file", "is empty"]),
    ("short file", ["--token-file", "fewer than 16"]),
    ("open file", ["--token-file", "mode 0644", "fix: chmod 600 "]),
    ("missing file", ["--token-file", "cannot be read (No such file or directory)", "fix:"]),
    ("folder", ["--token-file", "is not a regular file"]),
])
def test_a_bad_token_is_refused_in_one_line(tmp_path, case, words):
    env, path = {}, None
    if case == "empty variable":
        env = {"MESHRUN_JOB_TOKEN": ""}
    elif case == "short variable":
        env = {"MESHRUN_JOB_TOKEN": "s3cr3t"}
    elif case == "empty file":
        path = token_file(tmp_path, "\n", 0o600)
    elif case == "short file":
        path = token_file(tmp_path, "s3cr3t\n", 0o600)
    elif case == "open file":
        path = token_file(tmp_path, TOKEN, 0o644)
    elif case == "missing file":
        path = str(tmp_path / "missing")
    else:
        path = str(tmp_path)
    with pytest.raises(UsageError) as caught:
        token_from(env, path)
    message = caught.value.line()
    assert caught.value.exit_code == 2 and caught.value.code == "job-token-invalid"
    assert "\n" not in message and "s3cr3t" not in message and TOKEN not in message
    for word in words:
        assert word in message
    if case == "open file":
        assert f"fix: chmod 600 {path}" in message


def test_a_launch_nonce_keeps_one_launch_s_values_out_of_the_next():
    """A requeued job keeps its run id: values copied from one launch's store must not open
    in the next, whose node 0 drew another nonce."""
    first, later = Signer(TOKEN, RUN, nonce="a1"), Signer(TOKEN, RUN, nonce="b2")
    key = protocol.WATCH
    assert reason(Verifier(later), key, first.sign(key, "x")) == "mis-signed"
    assert Verifier(later).open(key, later.sign(key, "x")) == "x"


def test_compare_set_replaces_a_stranger_s_undecodable_value():
    from datetime import timedelta

    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", free_port(), is_master=True, wait_for_workers=False,
                     timeout=timedelta(seconds=5))
    key = protocol.cause_key(0)
    store.set(key, b"\xff\xfe")                       # not text: the stranger's bytes
    signed = SignedStore(store, Signer(TOKEN, RUN))
    assert signed.compare_set(key, "", "mine") == b"mine"
    assert signed.get(key) == b"mine"

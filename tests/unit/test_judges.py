"""The watchdog's pure judgements (runtime/judges.py): given ``now`` and what a beat read,
which nodes are lost, whose goodbye ends a node's part, whether no rank progressing is a
hang and who is stuck, and what a lost, returning or admitted node means for the
membership. No store, no thread, no sleep."""

from meshrun import protocol
from meshrun.runtime.events import (
    EventKind,
    Goodbye,
    grow_line,
    hang_line,
    kept_out_line,
    returned_line,
    shrink_line,
    takeover_line,
)
from meshrun.runtime.judges import (
    PROBE_WAIT_S,
    Hang,
    Silence,
    after_store_failure,
    failed_peer,
    fresh_progress,
    hang_found,
    hang_verdict,
    hang_watched,
    heard,
    lost_nodes,
    node_0_silence,
    on_admit,
    on_loss,
    on_return,
    others_said_goodbye,
    progress_moved,
    stopped_peer,
    unwatched_note,
    verdict_due,
)
from meshrun.runtime.membership import Change, Membership

BEAT = protocol.Heartbeat(7).encode()


def judge(now, seen, *, limit=15.0, goodbyes=(), dead=(), members=Membership.initial(4)):
    return lost_nodes(now, range(1, 4), seen=seen, started=0.0, limit=limit,
                      first_connect=10.0, goodbyes=dict.fromkeys(goodbyes, "done"),
                      dead=dead, members=members)


def test_a_node_is_lost_at_its_limit_of_silence_and_a_dead_link_names_it_at_once():
    seen = {1: (BEAT, 100.0), 2: (BEAT, 104.0), 3: (BEAT, 114.0)}
    assert judge(114.9, seen) == []
    assert judge(115.0, seen) == [Silence(1, 15.0)]
    assert judge(115.0, seen, limit=5.0) == [Silence(1, 15.0), Silence(2, 11.0)]
    assert judge(114.5, seen, dead={3}) == [Silence(3, 0.5, closed=True)]


def test_a_goodbye_is_never_a_loss_but_a_spare_that_left_is_gone():
    seen = {1: (BEAT, 0.0), 2: (BEAT, 0.0), 3: (BEAT, 0.0)}
    assert judge(100.0, seen, goodbyes={1, 2, 3}) == []
    spares = Membership.initial(4, 1)
    assert judge(1.0, {**seen, 3: (BEAT, 0.5)}, goodbyes={3}, members=spares) == \
        [Silence(3, 0.5, left=True)]


def test_a_node_at_beat_0_gets_its_first_connection_time_and_lost_ones_are_not_judged_again():
    seen = {1: (protocol.Heartbeat(0).encode(), 0.0), 2: (BEAT, 0.0), 3: (BEAT, 0.0)}
    members = Membership(seats=(0, 1, 2), lost=(3,))
    assert judge(20.0, seen, members=members) == [Silence(2, 20.0)]
    assert judge(25.0, seen, members=members) == [Silence(1, 25.0), Silence(2, 25.0)]


def test_progress_moves_on_a_new_position_not_on_a_new_report():
    pos = lambda v: tuple(int(x) for x in v.split(","))  # noqa: E731
    seen, stalled = progress_moved(10.0, {0: "1,5", 1: ""}, {}, pos)
    assert seen == {0: ((1, 5), 10.0)} and stalled == 0.0
    seen, stalled = progress_moved(14.0, {0: "1,5", 1: "1,4"}, seen, pos)
    assert seen == {0: ((1, 5), 10.0), 1: ((1, 4), 14.0)} and stalled == 0.0
    seen, stalled = progress_moved(30.0, {0: "1,5", 1: "1,4"}, seen, pos)
    assert stalled == 16.0                       # no rank moved since 14.0
    seen, stalled = progress_moved(31.0, {0: "1,6", 1: "1,4"}, seen, pos)
    assert stalled == 0.0 and seen[1] == ((1, 4), 14.0)
    assert progress_moved(5.0, {0: ""}, {}, pos) == ({}, 0.0)


# -- liveness --------------------------------------------------------------------------------

def test_heard_counts_a_changed_heartbeat_as_life_and_a_foreign_value_as_none():
    old = protocol.Heartbeat(3).encode()
    seen = {1: (old, 10.0), 2: (old, 10.0)}
    found = heard(20.0, {1: old, 2: protocol.Heartbeat(4).encode(), 3: ""}, seen, {})
    assert found.seen == {1: (old, 10.0), 2: (protocol.Heartbeat(4).encode(), 20.0)}
    assert found.bad == {} and found.goodbyes == {}
    assert seen[2] == (old, 10.0)                     # the beat before is not changed
    junk = heard(21.0, {1: "not a beat"}, found.seen, {})
    assert junk.seen[1] == (old, 10.0) and junk.bad == {1: "not a beat"}   # no sign of life
    back = heard(22.0, {1: protocol.Heartbeat(5).encode()}, junk.seen, junk.bad)
    assert back.bad == {} and back.seen[1][1] == 22.0


def test_heard_reads_the_goodbye_a_last_heartbeat_carries():
    found = heard(5.0, {1: protocol.Heartbeat(9, "failed").encode(),
                        2: protocol.Heartbeat(9, "later-version").encode()}, {}, {})
    assert found.goodbyes == {1: Goodbye.FAILED, 2: "later-version"}
    assert found.seen[1][1] == 5.0                    # a goodbye is a sign of life too


def test_node_0_is_lost_for_the_others_at_its_limit_plus_grace_and_never_after_a_goodbye():
    assert node_0_silence(14.9, 0.0, limit=15.0) is None
    assert node_0_silence(15.0, 0.0, limit=15.0) == 15.0
    assert node_0_silence(20.0, 0.0, limit=15.0, grace=10.0) is None     # not connected yet
    assert node_0_silence(25.0, 0.0, limit=15.0, grace=10.0) == 25.0
    assert node_0_silence(99.0, 0.0, limit=15.0, goodbye=True) is None


def test_a_failed_beat_is_node_0_failed_first_then_its_host_lost_at_the_limit():
    fail = dict(limit=5.0, local_failure=False)
    assert after_store_failure(3.0, 0.0, node_0_failed=True, **fail) == EventKind.PEER_FAILED
    assert after_store_failure(3.0, 0.0, node_0_failed=False, **fail) is None
    assert after_store_failure(5.0, 0.0, node_0_failed=False, **fail) == EventKind.STORE_LOST
    # this node's own workers failed first: node 0's failure is no news, its silence is
    assert after_store_failure(3.0, 0.0, limit=5.0, node_0_failed=True,
                               local_failure=True) is None
    assert after_store_failure(6.0, 0.0, limit=5.0, node_0_failed=True,
                               local_failure=True) == EventKind.STORE_LOST


def test_a_failed_seated_peer_ends_the_part_unless_this_nodes_workers_failed_first():
    m = Membership.initial(4, 1)                       # seats 0-2, spare 3
    said = {3: Goodbye.FAILED, 2: Goodbye.FAILED, 1: Goodbye.FAILED, 0: Goodbye.DONE}
    assert failed_peer(said, 0, m, local_failure=False) == 1          # the lowest seated
    assert failed_peer(said, 1, m, local_failure=False) == 2          # not itself
    assert failed_peer({3: Goodbye.FAILED}, 0, m, local_failure=False) is None  # a spare
    assert failed_peer(said, 0, m, local_failure=True) is None


def test_a_stopped_peer_ends_a_member_at_once_and_node_0_only_once_all_said_goodbye():
    m = Membership.initial(3)
    assert stopped_peer({2: Goodbye.STOPPED}, 1, m) == 2
    assert stopped_peer({2: Goodbye.DONE}, 1, m) is None
    assert stopped_peer({2: Goodbye.STOPPED}, 0, m) is None           # node 1 still works
    assert stopped_peer({1: Goodbye.DONE, 2: Goodbye.STOPPED}, 0, m) == 2
    assert others_said_goodbye({1: "done"}, m, 0) is False
    assert others_said_goodbye({1: "done", 2: "failed"}, m, 0) is True
    assert others_said_goodbye({0: "done", 2: "failed"}, m, 1) is True
    assert others_said_goodbye({1: "done"}, Membership.initial(3, 1), 0) is True  # a spare


# -- hangs -----------------------------------------------------------------------------------

def _at(step: int, coll: int, at: float = 100.0, active: int = -1) -> str:
    return protocol.Progress(step, at, coll=coll, work=0.5, active=active).encode()


def test_what_the_restarted_attempt_left_counts_as_silence():
    left = {0: _at(5, 50), 1: _at(5, 51)}
    values = {0: _at(5, 50), 1: _at(6, 60, at=200.0), 2: _at(1, 3, at=90.0), 3: ""}
    assert fresh_progress(values, left, restarted=150.0) == \
        {0: "", 1: values[1], 2: "", 3: ""}   # the same value; a report from before; none
    assert fresh_progress(values, {}, restarted=0.0) == values


def test_a_hang_is_found_when_no_rank_moved_for_the_timeout_and_not_a_second_before():
    seen, hang = hang_found(10.0, {0: _at(3, 30), 1: _at(3, 31)}, {}, 5.0)
    assert hang is None
    seen, hang = hang_found(14.9, {0: _at(3, 30), 1: _at(3, 31)}, seen, 5.0)
    assert hang is None
    seen, hang = hang_found(15.0, {0: _at(3, 30, active=7), 1: _at(3, 31)}, seen, 5.0)
    assert hang is None                  # active seconds moved: a rank working on a CPU
    values = {0: _at(3, 30, active=7), 1: _at(3, 31)}
    seen, hang = hang_found(20.0, values, seen, 5.0)
    assert hang == Hang(since=20.0, stalled=5.0, values=values)


def test_the_verdict_waits_for_every_probe_or_the_probe_wait():
    hang = Hang(since=100.0, stalled=300.0, values={})
    assert verdict_due(100.5, hang, answered=True)
    assert not verdict_due(100.0 + PROBE_WAIT_S - 0.1, hang, answered=False)
    assert verdict_due(100.0 + PROBE_WAIT_S, hang, answered=False)


def test_the_verdict_names_the_rank_behind_on_its_node_and_restarts_only_with_every_node():
    members = Membership(epoch=1, seats=(0, 2), lost=(1,))     # node 2 holds seat 1
    hang = Hang(since=100.0, stalled=300.0,
                values={0: _at(7, 70), 1: _at(7, 70), 2: _at(7, 69), 3: _at(7, 70)})
    probes = {0: protocol.Probe((), 1), 2: protocol.Probe(((2, "not in a collective"),), 1)}
    verdict = hang_verdict(104.0, hang, probes, members=members, nproc=2,
                           hosts={0: "a", 2: "c"})
    assert verdict.stuck == ((2, 2, "c"),) and verdict.restart is True
    assert verdict.line == hang_line([(2, 2, "c")], 304.0)
    no_restart = hang_verdict(104.0, hang, {0: probes[0]}, members=members, nproc=2,
                              hosts={})                  # node 2 never answered
    assert no_restart.restart is False and no_restart.stuck == ((2, 2, "?"),)


def test_the_verdict_on_collectives_alone_says_so_and_a_stopped_rank_comes_first():
    members = Membership.initial(2)
    hang = Hang(since=0.0, stalled=60.0, values={0: _at(-1, 21), 1: _at(-1, 20), 2: ""})
    verdict = hang_verdict(0.0, hang, {}, members=members, nproc=2, hosts={})
    assert [r for r, _, _ in verdict.stuck] == [1]
    assert "no collective completed on any rank" in verdict.line
    stopped = hang_verdict(0.0, hang, {1: protocol.Probe(((3, "stopped"),), 0)},
                           members=members, nproc=2, hosts={})
    assert stopped.stuck == ((3, 1, "?"),)


def test_hangs_are_watched_only_with_a_timeout_and_while_no_seated_nodes_workers_are_over():
    m = Membership.initial(3, 1)
    assert hang_watched(300.0, m, {}, ended=False)
    assert not hang_watched(0.0, m, {}, ended=False)
    assert not hang_watched(300.0, m, {}, ended=True)         # this node's workers are over
    assert not hang_watched(300.0, m, {1: "done"}, ended=False)
    assert hang_watched(300.0, m, {2: "stopped"}, ended=False)  # a spare left: no matter


def test_the_unwatched_note_comes_only_after_a_run_longer_than_the_timeout_without_progress():
    assert unwatched_note(110.0, 100.0, hang_timeout=10.0, progress_seen=False) is not None
    assert unwatched_note(109.9, 100.0, hang_timeout=10.0, progress_seen=False) is None
    assert unwatched_note(500.0, 100.0, hang_timeout=10.0, progress_seen=True) is None
    assert unwatched_note(500.0, 100.0, hang_timeout=0.0, progress_seen=False) is None
    assert unwatched_note(500.0, 0.0, hang_timeout=10.0, progress_seen=False) is None
    assert "--hang-timeout 10 had nothing to watch" in \
        unwatched_note(110.0, 100.0, hang_timeout=10.0, progress_seen=False)


# -- membership ------------------------------------------------------------------------------

def _loss(m, node, *, closed=False, min_seats=None):
    return on_loss(m, node, 16.04, closed=closed, next_round=7, min_seats=min_seats, nproc=2,
                   host=f"h{node}")


def test_a_takeover_and_a_shrink_restart_every_seat_with_the_line_as_the_epochs_reason():
    take = _loss(Membership.initial(4, 1), 1)
    assert take.change == Change.TAKEOVER and take.change.restarts and take.node == 1
    assert take.members.seats == (0, 3, 2) and take.members.round == 7
    assert take.members.reason == take.line == takeover_line(
        1, "h1", 16.04, 3, (2, 3), 1, spares_left=0)
    shrink = _loss(Membership.initial(4), 2, closed=True, min_seats=2)
    assert shrink.change == Change.SHRINK and shrink.change.restarts
    assert shrink.members.seats == (0, 1, 3) and shrink.members.reason == shrink.line
    assert shrink.line == shrink_line(2, "h2", 16.04, 3, 2, 2, 1, closed=True)


def test_a_lost_spare_is_a_notice_and_a_fatal_or_known_loss_says_nothing():
    spare = _loss(Membership.initial(3, 1), 2)
    assert spare.change == Change.SPARE_LOST and not spare.change.restarts
    assert spare.members.spares == () and spare.members.reason == ""   # no new epoch
    assert spare.line.startswith("meshrun: spare node 2 (h2) is lost (last heartbeat 16.0 s")
    died = _loss(Membership.initial(3, 1), 2, closed=True)   # its link closed bare: no age
    assert died.line.startswith("meshrun: spare node 2 (h2) is lost (its agent's connection "
                                "closed without a goodbye (the process died)); training goes on")
    fatal = _loss(Membership.initial(3), 1, min_seats=3)              # at the minimum
    assert (fatal.change, fatal.members, fatal.line) == (Change.FATAL, Membership.initial(3), "")
    assert _loss(Membership.initial(3), 0, min_seats=1).change == Change.FATAL   # node 0
    known = _loss(spare.members, 2)
    assert known.change == Change.KNOWN and known.line == ""


def test_a_node_back_waits_as_a_spare_and_one_lost_too_often_is_kept_out():
    lost = Membership(epoch=1, seats=(0, 2), lost=(1,), strikes=((1, 1),))
    back = on_return(lost, 1, "h1b")
    assert back.change == Change.RETURNED and back.members.spares == (1,)
    assert back.line == returned_line(1, "h1b", 1) and not back.change.restarts
    flapping = Membership(epoch=3, seats=(0, 2), lost=(1,), strikes=((1, 3),))
    out = on_return(flapping, 1, "h1")
    assert out.change == Change.KEPT_OUT and out.members.kept_out == (1,)
    assert out.members.spares == () and out.line == kept_out_line(1, "h1", 3)


def test_a_shrunk_job_seats_its_lowest_spare_last_and_a_whole_one_admits_nobody():
    shrunk = Membership(epoch=1, seats=(0, 2), spares=(1, 3))
    grow = on_admit(shrunk, 3, step=30, next_round=5, nproc=2, hosts={1: "h1"})
    assert grow is not None and grow.change == Change.GROW and grow.change.restarts
    assert grow.node == 1 and grow.members.seats == (0, 2, 1) and grow.members.round == 5
    assert grow.members.reason == grow.line == grow_line(1, "h1", 3, 2, 2, 30)
    assert on_admit(grow.members, 3, step=40, next_round=6, nproc=2, hosts={}) is None
    assert on_admit(Membership(seats=(0, 2)), 3, step=1, next_round=1, nproc=2,
                    hosts={}) is None                          # no spare to seat

"""The watchdog's pure judgements (runtime/judges.py): given ``now`` and what a beat read,
which nodes are lost and how long no rank has progressed. No store, no thread, no sleep."""

from meshrun import protocol
from meshrun.runtime.judges import Silence, lost_nodes, progress_moved
from meshrun.runtime.membership import Membership

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

"""The job's membership (runtime/membership.py): who holds which seat, the spares, the lost
nodes, and the decisions on a lost or returning node. Pure."""

import pytest

from meshrun.runtime.membership import (
    UNKNOWN_CHECKPOINT,
    Adoption,
    Change,
    Membership,
    admit_at,
    adoption,
    after_loss,
    after_return,
)


def test_the_highest_node_ranks_start_as_spares_and_seats_follow_node_order():
    m = Membership.initial(5, 2)
    assert m.seats == (0, 1, 2) and m.spares == (3, 4) and m.lost == () and m.epoch == 0
    assert [m.role(n) for n in range(5)] == ["seated"] * 3 + ["spare"] * 2
    assert m.ranks_of(2, 4) == (8, 9, 10, 11) and m.ranks_of(3, 4) == ()
    assert [m.node_of_rank(r, 2) for r in range(6)] == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("nnodes,spares", [(2, 2), (1, 1), (3, -1)])
def test_a_membership_needs_a_seated_node(nnodes, spares):
    with pytest.raises(ValueError):
        Membership.initial(nnodes, spares)


def test_the_lowest_spare_takes_the_lost_nodes_seat_in_a_new_epoch_and_ranks_follow_the_seat():
    m = Membership.initial(4, 2)            # seats 0, 1; spares 2, 3
    after, change = after_loss(m, 1, next_round=7)
    assert change == Change.TAKEOVER
    assert after.seats == (0, 2) and after.spares == (3,) and after.lost == (1,)
    assert after.epoch == 1 and after.round == 7 and "spare node 2" in after.reason
    assert after.ranks_of(2, 2) == (2, 3) == m.ranks_of(1, 2)   # the same global ranks
    assert after.node_of_rank(3, 2) == 2
    again, change = after_loss(after, 1, next_round=9)
    assert change == Change.KNOWN and again == after


def test_a_lost_spare_is_reported_and_a_seated_node_without_spares_or_node_0_is_fatal():
    m = Membership.initial(3, 1)
    after, change = after_loss(m, 2, next_round=1)
    assert change == Change.SPARE_LOST and after.spares == () and after.lost == (2,)
    assert after.epoch == 0 and after.seats == m.seats          # nothing restarts
    assert after_loss(after, 1, next_round=1) == (after, Change.FATAL)
    assert after_loss(m, 0, next_round=1) == (m, Change.FATAL)  # node 0 hosts the store


def test_a_lost_node_that_comes_back_waits_as_a_spare_and_can_take_the_next_seat():
    m, _ = after_loss(Membership.initial(3, 1), 1, next_round=1)   # 2 took seat 1
    back = after_return(m, 1)
    assert back.spares == (1,) and back.lost == () and back.seats == (0, 2)
    assert back.epoch == m.epoch                    # a spare more changes no seat
    assert after_return(back, 1) == back            # not lost: unchanged
    later, change = after_loss(back, 2, next_round=4)
    assert change == Change.TAKEOVER and later.seats == (0, 1) and later.epoch == 2


def test_the_membership_round_trips_as_json_and_refuses_one_without_seats():
    m, _ = after_loss(Membership.initial(4, 1), 2, next_round=3, why="because")
    assert Membership.decode(m.encode()) == m
    assert Membership.decode(m.encode().encode()) == m
    with pytest.raises(ValueError):
        Membership.from_json({"seats": []})


def test_a_node_lost_three_times_is_kept_out_when_it_comes_back():
    from meshrun.runtime.membership import KEEP_OUT

    m = Membership.initial(3, 1)
    for time in range(KEEP_OUT):
        m, change = after_loss(m, 1, next_round=time + 1)
        assert m.strikes_of(1) == time + 1
        m = after_return(m, 1)
        if time < KEEP_OUT - 1:
            assert m.role(1) == "spare"
            m, _ = after_loss(m, m.seats[1], next_round=time + 1)  # the other one goes
            m = after_return(m, m.lost[-1])                         # and comes back
    assert m.role(1) == "kept out" and 1 not in m.spares and 1 not in m.lost
    assert after_loss(m, 1, next_round=9) == (m, Change.KNOWN)
    assert Membership.decode(m.encode()) == m


def test_with_no_spare_left_the_job_shrinks_to_its_minimum_with_contiguous_seats_then_stops():
    from meshrun.runtime.membership import after_admit

    m = Membership.initial(4)                              # seats 0..3, no spare
    assert after_loss(m, 2, next_round=3) == (m, Change.FATAL)      # no minimum: as before
    small, change = after_loss(m, 1, next_round=3, min_seats=2)
    assert change == Change.SHRINK and small.seats == (0, 2, 3) and small.lost == (1,)
    assert small.epoch == 1 and small.round == 3 and "goes on with 3 nodes" in small.reason
    assert small.ranks_of(2, 2) == (2, 3) and small.ranks_of(3, 2) == (4, 5)  # moved down
    smaller, change = after_loss(small, 3, next_round=5, min_seats=2)
    assert change == Change.SHRINK and smaller.seats == (0, 2)
    assert after_loss(smaller, 2, next_round=6, min_seats=2) == (smaller, Change.FATAL)
    assert after_loss(small, 0, next_round=6, min_seats=1) == (small, Change.FATAL)
    # node 1 comes back: a spare, admitted at a checkpoint boundary into a new last seat
    back = after_return(smaller, 1)
    assert back.spares == (1,) and back.seats == (0, 2)
    grown = after_admit(back, 4, next_round=8)
    assert grown.seats == (0, 2, 1) and grown.spares == () and grown.epoch == back.epoch + 1
    assert grown.round == 8 and "grows to 3 nodes" in grown.reason
    assert after_admit(grown, 4, next_round=9) == grown          # no spare: unchanged
    assert after_admit(after_return(m, 1), 4, next_round=9) == m  # whole: unchanged
    assert Membership.decode(grown.encode()) == grown


def test_a_spare_is_used_before_the_job_shrinks():
    m = Membership.initial(4, 1)                           # seats 0..2, spare 3
    after, change = after_loss(m, 1, next_round=2, min_seats=2)
    assert change == Change.TAKEOVER and after.seats == (0, 3, 2)


def test_a_rank_of_the_larger_world_has_no_node_once_the_job_shrank():
    from meshrun.runtime.membership import Membership, after_loss

    m, _ = after_loss(Membership.initial(3), 1, next_round=1, min_seats=2)
    assert m.seats == (0, 2)
    assert [m.node_of_rank(r, 1) for r in range(3)] == [0, 2, -1]


def test_a_node_back_in_a_shrunk_job_is_admitted_only_past_the_checkpoint_of_its_return():
    assert admit_at(None, None) == (True, None)           # no recipe: at once
    assert admit_at(UNKNOWN_CHECKPOINT, None) == (False, None)   # the folder not read yet
    assert admit_at(UNKNOWN_CHECKPOINT, 20) == (False, 20)
    assert admit_at(20, None) == (False, 20)              # the boundary noted: 20
    assert admit_at(20, 20) == (False, 20)
    assert admit_at(30, 20) == (True, None)               # a newer complete checkpoint
    assert admit_at(-1, None) == (False, -1) and admit_at(10, -1) == (True, None)


def test_another_node_restarts_for_an_epoch_that_seats_it_and_stops_when_replaced():
    old = Membership.initial(4, 1)                        # seats 0-2, spare 3
    took, _ = after_loss(old, 1, next_round=2)            # spare 3 takes node 1's seat
    assert adoption(old, old, 2) == Adoption.SAME
    assert adoption(old, took, 2) == Adoption.RESTART     # still seated, a new epoch
    assert adoption(old, took, 3) == Adoption.RESTART     # the spare, seated now
    assert adoption(old, took, 1) == Adoption.REPLACED    # it was lost (frozen) meanwhile
    lost_spare, _ = after_loss(old, 3, next_round=2)      # no new epoch
    assert adoption(old, lost_spare, 2) == Adoption.KEEP
    assert adoption(took, after_return(took, 1), 2) == Adoption.KEEP   # a spare more
    assert adoption(took, took, 1) == Adoption.SAME       # already listed as lost


def test_only_a_change_of_seats_restarts_the_workers():
    assert {c for c in Change if c.restarts} == {Change.TAKEOVER, Change.SHRINK, Change.GROW}

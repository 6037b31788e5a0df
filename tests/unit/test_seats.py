"""The watchdog's membership bookkeeping (runtime/seats.py) and its notices
(runtime/notices.py), over a store kept in a dict: what node 0 publishes for a lost,
returning or admitted node, what it asks and when, and what the others adopt."""

from __future__ import annotations

from meshrun import protocol
from meshrun.runtime.judges import Silence
from meshrun.runtime.membership import UNKNOWN_CHECKPOINT, Adoption, Change, Membership
from meshrun.runtime.notices import KEEP, Notices
from meshrun.runtime.rendezvous import Rounds
from meshrun.runtime.seats import Seats


class MemoryStore:
    """The store calls the watchdog's parts make, on a dict (values as bytes)."""

    def __init__(self, data: dict | None = None):
        self.data = {k: v.encode() if isinstance(v, str) else v for k, v in (data or {}).items()}

    def set(self, key, value):
        self.data[key] = value.encode() if isinstance(value, str) else value

    def get(self, key):
        return self.data[key]

    def check(self, keys):
        return all(k in self.data for k in keys)

    def multi_get(self, keys):
        return [self.data[k] for k in keys]

    def compare_set(self, key, expected, desired):
        """TCPStore's: set ``desired`` where the key holds ``expected`` ("": is absent)."""
        now = self.data.get(key)
        if (now is None and expected == "") or now == expected.encode():
            self.set(key, desired)
        return self.data[key] if key in self.data else expected.encode()

    def add(self, key, amount):
        value = int(self.data.get(key, b"0")) + amount
        self.data[key] = str(value).encode()
        return value


def _claim(node: int, host: str, token: str) -> str:
    return protocol.NodeClaim(host, 100 + node, token).encode()


def test_a_takeover_is_published_for_the_rendezvous_and_a_node_coming_back():
    rounds = Rounds()
    rounds.current = 4                              # the workers run round 4
    store = MemoryStore({protocol.node_key(1): _claim(1, "h1", "aaaa")})
    seats = Seats(0, 4, 6, spares=1, rounds=rounds)
    assert seats.nproc == 2 and rounds.members == Membership.initial(4, 1)
    reseat = seats.lose(store, Silence(1, 15.0), "h1")
    assert reseat.change == Change.TAKEOVER and reseat.members.round == 5   # the next round
    assert seats.members == reseat.members == rounds.members
    assert Membership.decode(store.get(protocol.MEMBERS)) == reseat.members
    assert seats.elastic
    again = seats.lose(store, Silence(1, 16.0), "h1")
    assert again.change == Change.KNOWN and seats.members == reseat.members


def test_a_fatal_loss_publishes_nothing():
    store = MemoryStore()
    seats = Seats(0, 3, 3)
    assert seats.lose(store, Silence(2, 15.0), "h2").change == Change.FATAL
    assert protocol.MEMBERS not in store.data and not seats.elastic


def test_a_lost_node_returns_when_its_claim_changes_and_its_new_host_is_named():
    store = MemoryStore({protocol.node_key(1): _claim(1, "h1", "aaaa")})
    seats = Seats(0, 3, 2, spares=1)
    seats.lose(store, Silence(1, 15.0), "h1")       # spare 2 takes the seat
    hosts = {0: "h0", 1: "h1", 2: "h2"}
    assert seats.returns(store, hosts) == []         # the claim it was lost with
    store.set(protocol.node_key(1), _claim(1, "h1b", "bbbb"))    # started again
    (back,) = seats.returns(store, hosts)
    assert back.change == Change.RETURNED and back.node == 1 and hosts[1] == "h1b"
    assert back.line == "meshrun: node 1 (h1b) is back and waits as a spare (1 spare now)"
    assert seats.members.spares == (1,) and seats.members.lost == ()
    assert Membership.decode(store.get(protocol.MEMBERS)) == seats.members
    assert seats.returns(store, hosts) == []         # not lost any more


def test_a_shrunk_job_asks_for_the_checkpoint_only_while_a_node_waits_and_grows_past_it():
    store = MemoryStore()
    asked: list[int] = []
    newest = [UNKNOWN_CHECKPOINT]

    def checkpoint():
        asked.append(1)
        return newest[0]

    seats = Seats(0, 3, 3, min_seats=2)
    assert seats.admit(store, checkpoint, {}) is None and asked == []   # whole: not asked
    seats.lose(store, Silence(1, 15.0), "h1")       # shrinks to seats (0, 2)
    assert seats.admit(store, checkpoint, {}) is None and asked == []   # no spare waits
    store.set(protocol.node_key(1), _claim(1, "h1", "cccc"))
    seats.returns(store, {})
    assert seats.admit(store, checkpoint, {}) is None and len(asked) == 1   # not read yet
    newest[0] = 20
    assert seats.admit(store, checkpoint, {}) is None                    # boundary: 20
    assert seats.admit(store, checkpoint, {}) is None                    # still 20
    newest[0] = 30
    grow = seats.admit(store, checkpoint, {1: "h1"})
    assert grow is not None and grow.change == Change.GROW
    assert seats.members.seats == (0, 2, 1) and "(step 30 or newer)" in grow.line
    assert Membership.decode(store.get(protocol.MEMBERS)) == seats.members


def test_the_others_adopt_node_0s_membership_and_ignore_what_is_none():
    rounds = Rounds()
    seats = Seats(2, 3, 2, spares=1, rounds=rounds)
    assert seats.adopt(None) == Adoption.SAME and seats.adopt({"seats": []}) == Adoption.SAME
    took = Membership(epoch=1, seats=(0, 2), lost=(1,), round=3, reason="node 1 was lost")
    assert seats.adopt(took.to_json()) == Adoption.RESTART
    assert seats.members == took == rounds.members
    assert seats.adopt(took.to_json()) == Adoption.SAME


def test_the_rounds_learn_the_goodbyes_and_the_newest_round_a_node_arrived_at():
    rounds = Rounds()
    rounds.current = 2
    store = MemoryStore()
    seats = Seats(0, 2, 2, rounds=rounds)
    seats.arrived(store, {1: "failed"})
    assert rounds.goodbyes == {1: "failed"} and rounds.wanted == 0 and seats.wanted == 0
    store.add(protocol.round_arrived_key(3), 1)      # node 1's agent arrived at round 3
    seats.arrived(store, {})
    assert rounds.wanted == 3 and seats.wanted == 3
    member = Rounds()
    Seats(1, 2, 2, rounds=member).follow(protocol.Watch(9, round=3, goodbyes={0: "done"}),
                                          hold=True)
    assert member.wanted == 3 and member.goodbyes == {0: "done"} and member.held


def test_node_0_numbers_notices_keeps_the_newest_and_the_others_print_each_once():
    node_0, member = Notices(), Notices()
    records = [node_0.number({"kind": "slow", "node": n}) for n in range(KEEP + 2)]
    assert [r["seq"] for r in records] == list(range(1, KEEP + 3))
    assert node_0.newest == tuple(records[-KEEP:])
    assert [r["node"] for r in member.unseen(node_0.newest)] == list(range(2, KEEP + 2))
    assert member.unseen(node_0.newest) == []        # the next watch carries them again
    later = node_0.number({"kind": "slow", "node": 99})
    assert member.unseen(node_0.newest) == [later]

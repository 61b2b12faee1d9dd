"""The never-twice checker's own rules (tests/support/never_twice.py), on made-up answers."""

from __future__ import annotations

from tests.support.never_twice import FAULTS, Answer, Ledger, generation_of, plan


def ledger_of(*answers: tuple[int, int, float]) -> Ledger:
    ledger = Ledger()
    for port, generation, received in answers:
        ledger.record(Answer(port, generation, received - 0.01, received))
    return ledger


def test_an_older_generation_answering_after_a_newer_one_is_a_violation():
    found = ledger_of((1, 1, 1.0), (2, 2, 2.0), (1, 1, 3.0)).violations()
    assert len(found) == 1 and found[0].older.received == 3.0 and found[0].newer.generation == 2
    assert "generation 1 answered on port 1" in str(found[0])


def test_generations_that_only_rise_are_fine_in_whatever_order_they_were_recorded():
    assert ledger_of((2, 2, 5.0), (1, 1, 1.0), (1, 1, 2.0), (3, 3, 9.0), (2, 2, 6.0)).violations() == []


def test_a_copy_from_before_failover_counts_as_generation_zero():
    assert generation_of(b'{"generation": null}') == 0
    assert generation_of(b'{"generation": 4}') == 4
    assert generation_of(b'{"generation": true}') is None and generation_of(b"not json") is None
    assert generation_of(b'{"node_id": "a", "generation": 2}', "a") == 2
    assert generation_of(b'{"node_id": "b", "generation": 2}', "a") is None  # another node on a freed port
    assert generation_of(b'{"generation": -1}') is None and generation_of(b"[1]") is None


def test_the_plan_is_the_seeds_and_carries_every_fault_it_must():
    first = plan(7, 5, FAULTS[:3], must=("freeze", "kill_host", "kill_etcd"))
    assert first == plan(7, 5, FAULTS[:3], must=("freeze", "kill_host", "kill_etcd"))
    assert len(first) == 5 and {"freeze", "kill_host", "kill_etcd"} <= set(first)
    assert plan(1, 2, FAULTS, must=("freeze", "kill_host", "kill_etcd")) != []

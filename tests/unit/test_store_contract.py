"""One contract for the pending-approval state, run against every backend (SQLite file, DynamoDB under moto)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from letta_gateway.errors import InvalidRequest
from letta_gateway.store import (
    AlreadyAnswered,
    PendingApprovals,
    PendingBackend,
    ResumeInProgress,
    ResumeUnconfirmed,
    ToolCallEntry,
    ToolCallsNotFound,
    ToolResultsAlreadySubmitted,
)
from letta_gateway.store.base import thread_key

CALLS = [ToolCallEntry("call_1", "read_file"), ToolCallEntry("call_2", "list_files")]


class Clock:
    def __init__(self, now: float = 1_800_000_000) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def approvals(backend_factory: Callable[[], PendingBackend], clock: Clock) -> PendingApprovals:
    return PendingApprovals(backend_factory(), ttl_seconds=600, clock=clock)


def pause(approvals: PendingApprovals, owner: str = "key-alice", agent: str = "agent-1", calls=CALLS):
    return approvals.save_pause(
        owner=owner,
        agent_id=agent,
        conversation_id=None,
        run_id="run-1",
        approval_message_id="message-1",
        tool_calls=calls,
    )


def claim(approvals: PendingApprovals, ids=("call_1", "call_2"), owner: str = "key-alice", agent: str = "agent-1"):
    return approvals.claim(owner=owner, agent_id=agent, conversation_id=None, tool_call_ids=list(ids))


def test_round_trip_preserves_the_record(approvals: PendingApprovals) -> None:
    saved = pause(approvals)
    assert approvals.backend.get(thread_key("agent-1", None)) == saved
    assert saved.status == "pending" and saved.expires_at == saved.created_at + 600
    assert approvals.current("key-alice", "agent-1", None) == saved


def test_claim_is_order_independent_and_moves_to_resuming(approvals: PendingApprovals) -> None:
    pause(approvals)
    claimed = claim(approvals, ids=("call_2", "call_1"))
    assert claimed.status == "resuming"
    assert [c.id for c in claimed.tool_calls] == ["call_1", "call_2"]


def test_second_claim_is_unconfirmed_then_answered_by_the_resume_run(approvals: PendingApprovals) -> None:
    pause(approvals)
    claimed = claim(approvals)
    with pytest.raises(ResumeUnconfirmed) as info:
        claim(approvals)  # only Letta knows whether the first claim's request is still running
    assert info.value.record == claimed
    approvals.complete(claimed, "run-2")  # what a retry records once Letta showed the answering run
    stored = approvals.backend.get(thread_key("agent-1", None))
    assert stored is not None and stored.status == "done" and stored.resume_run_id == "run-2"
    with pytest.raises(AlreadyAnswered) as answered:
        claim(approvals)
    assert answered.value.run_id == "run-2"
    with pytest.raises(ToolCallsNotFound):
        claim(approvals, owner="key-bob")  # a retry under another key learns nothing


def test_completed_without_a_run_id_is_already_submitted(approvals: PendingApprovals) -> None:
    pause(approvals)
    approvals.complete(claim(approvals), None)
    with pytest.raises(ToolResultsAlreadySubmitted):
        claim(approvals)


def test_results_that_led_to_the_next_pause_are_answered_by_their_run(approvals: PendingApprovals) -> None:
    pause(approvals)
    claimed = claim(approvals)
    approvals.save_pause(
        owner="key-alice",
        agent_id="agent-1",
        conversation_id=None,
        run_id="run-2",
        approval_message_id="message-2",
        tool_calls=[ToolCallEntry("call_3", "read_file")],
        answered=claimed,
        answered_run_id="run-2",
    )
    with pytest.raises(AlreadyAnswered) as answered:
        claim(approvals)
    assert answered.value.run_id == "run-2"
    assert claim(approvals, ids=("call_3",)).status == "resuming"


def test_release_makes_it_consumable_again(approvals: PendingApprovals) -> None:
    pause(approvals)
    approvals.release(claim(approvals))
    assert claim(approvals).status == "resuming"


@pytest.mark.parametrize(
    ("ids", "fragments"),
    [
        (("call_1",), ["missing results for call_2"]),
        (("call_1", "call_2", "call_9"), ["unknown tool_call_id(s) call_9"]),
        (("call_1", "call_9"), ["missing results for call_2", "unknown tool_call_id(s) call_9"]),
    ],
)
def test_mismatched_ids_are_listed(approvals: PendingApprovals, ids: tuple[str, ...], fragments: list[str]) -> None:
    pause(approvals)
    with pytest.raises(InvalidRequest) as info:
        claim(approvals, ids=ids)
    assert all(f in info.value.message for f in fragments)
    assert claim(approvals).status == "resuming"  # a rejected claim leaves the record pending


def test_other_owner_sees_nothing(approvals: PendingApprovals) -> None:
    pause(approvals)
    with pytest.raises(ToolCallsNotFound) as info:
        claim(approvals, owner="key-bob")
    assert info.value.status_code == 404 and "key-alice" not in info.value.message
    assert approvals.current("key-bob", "agent-1", None) is None
    assert claim(approvals).status == "resuming"


def test_abandon_takes_the_owners_record_even_when_expired(approvals: PendingApprovals, clock: Clock) -> None:
    pause(approvals)
    assert approvals.abandon("key-bob", "agent-1", None) is None
    clock.now += 601
    taken = approvals.abandon("key-alice", "agent-1", None)
    assert taken is not None and taken.status == "resuming"
    assert approvals.abandon("key-alice", "agent-1", None) is None  # exactly once


def test_missing_record_is_not_found(approvals: PendingApprovals) -> None:
    with pytest.raises(ToolCallsNotFound):
        claim(approvals, agent="agent-nope")


def test_expired_records_are_absent_on_every_read(approvals: PendingApprovals, clock: Clock) -> None:
    pause(approvals)
    clock.now += 601
    assert approvals.current("key-alice", "agent-1", None) is None
    with pytest.raises(ToolCallsNotFound):
        claim(approvals)


def test_a_new_pause_replaces_the_threads_record(approvals: PendingApprovals) -> None:
    pause(approvals)
    approvals.complete(claim(approvals), "run-2")
    pause(approvals, calls=[ToolCallEntry("call_3", "read_file")])
    assert claim(approvals, ids=("call_3",)).status == "resuming"


def test_threads_are_independent(approvals: PendingApprovals) -> None:
    pause(approvals, agent="agent-1")
    pause(approvals, agent="agent-2", calls=[ToolCallEntry("call_9", "x")])
    assert claim(approvals, agent="agent-2", ids=("call_9",)).status == "resuming"
    assert claim(approvals, agent="agent-1").status == "resuming"


def test_exactly_one_of_many_concurrent_claims_wins(
    backend_factory: Callable[[], PendingBackend], clock: Clock
) -> None:
    """Separate instances (as separate Lambda invocations would be) race for one record."""
    instances = [PendingApprovals(backend_factory(), ttl_seconds=600, clock=clock) for _ in range(8)]
    pause(instances[0])
    outcomes: list[str] = []
    barrier = threading.Barrier(len(instances))

    def race(a: PendingApprovals) -> None:
        barrier.wait()
        try:
            claim(a)
            outcomes.append("won")
        except ResumeUnconfirmed:
            outcomes.append("in_progress")

    threads = [threading.Thread(target=race, args=(a,)) for a in instances]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(outcomes) == ["in_progress"] * 7 + ["won"]


def _claim_in_process(path: str, start: float, out: object) -> None:
    import time as _time

    from letta_gateway.store.sqlite import SQLiteBackend

    approvals = PendingApprovals(SQLiteBackend(path), ttl_seconds=600, clock=lambda: 1_800_000_000)
    while _time.time() < start:
        _time.sleep(0.001)
    try:
        claim(approvals)
        out.put("won")  # type: ignore[attr-defined]
    except ResumeUnconfirmed:
        out.put("in_progress")  # type: ignore[attr-defined]


def test_sqlite_claims_are_exclusive_across_worker_processes(tmp_path) -> None:
    import multiprocessing
    import time as _time

    from letta_gateway.store.sqlite import SQLiteBackend

    path = str(tmp_path / "shared.sqlite3")
    pause(PendingApprovals(SQLiteBackend(path), ttl_seconds=600, clock=lambda: 1_800_000_000))
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    start = _time.time() + 2.0
    procs = [ctx.Process(target=_claim_in_process, args=(path, start, out)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert sorted(out.get(timeout=5) for _ in procs) == ["in_progress"] * 3 + ["won"]


def test_a_claim_without_a_live_owner_is_stale_and_taken_over_once(approvals: PendingApprovals, clock: Clock) -> None:
    from letta_gateway.store import StaleResume

    approvals = PendingApprovals(approvals.backend, ttl_seconds=86400, clock=clock)
    pause(approvals)
    claim(approvals)
    clock.now += approvals.lease_seconds - 1
    with pytest.raises(ResumeUnconfirmed):
        claim(approvals)
    clock.now += 2
    with pytest.raises(StaleResume) as stale:
        claim(approvals)
    taken = approvals.take_over(stale.value.record)
    assert taken.status == "resuming" and taken.updated_at == int(clock.now)
    with pytest.raises(ResumeInProgress):
        approvals.take_over(stale.value.record)  # someone else's take-over of the same stale claim loses


def test_markers_are_created_once_until_they_expire(approvals: PendingApprovals, clock: Clock) -> None:
    backend = approvals.backend
    now = int(clock.now)
    assert backend.create_marker("idem#k", {"v": 1}, now + 10, now) is None
    assert backend.create_marker("idem#k", {"v": 2}, now + 10, now) == {"v": 1}
    backend.put_marker("idem#k", {"v": 3}, now + 10)
    assert backend.create_marker("idem#k", {"v": 4}, now + 10, now) == {"v": 3}
    assert backend.create_marker("idem#k", {"v": 5}, now + 30, now + 11) is None  # the old one expired
    backend.delete_marker("idem#k")
    assert backend.create_marker("idem#k", {"v": 6}, now + 10, now) is None
    assert backend.get(thread_key("agent-1", None)) is None  # markers and pending records do not mix

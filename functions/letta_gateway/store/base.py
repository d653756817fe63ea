"""Pending tool-call state: the policy, written once over a few storage primitives.

A paused agent thread has at most one pending approval (Letta blocks the thread until it is answered), so a record
is keyed by the thread: (agent id, conversation id). Its life: `pending` (saved when the agent pauses) ->
`resuming` (claimed by exactly one request, by a conditional write) -> `done` (Letta accepted the tool results),
or back to `pending` when Letta did not accept them. Expired records are absent on every read: TTL deletion is lazy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ..errors import Conflict, InvalidRequest, NotFound

Status = Literal["pending", "resuming", "done"]
Clock = Callable[[], float]


@dataclass(frozen=True)
class ToolCallEntry:
    id: str
    name: str


@dataclass(frozen=True)
class PendingRecord:
    agent_id: str
    conversation_id: str | None
    owner: str
    run_id: str | None
    approval_message_id: str | None
    tool_calls: tuple[ToolCallEntry, ...]
    created_at: int
    expires_at: int
    status: Status = "pending"
    resume_run_id: str | None = None
    updated_at: int = 0
    # The tool results that led to this pause and the Letta run that answered them: a retry of those results
    # is answered again from that run.
    previous_ids_key: str | None = None
    previous_run_id: str | None = None

    @property
    def thread_key(self) -> str:
        return thread_key(self.agent_id, self.conversation_id)

    @property
    def ids_key(self) -> str:
        return ids_key(c.id for c in self.tool_calls)

    def expired(self, now: float) -> bool:
        return self.expires_at <= now


def thread_key(agent_id: str, conversation_id: str | None) -> str:
    return f"thread#{agent_id}#{conversation_id or 'default'}"


def ids_key(ids: Sequence[str] | object) -> str:
    """Order-independent identity of a set of tool_call_ids (what a condition compares)."""
    return "\x1f".join(sorted(ids))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Expect:
    """The condition a transition requires of the stored record."""

    status: Status
    owner: str
    ids_key: str | None
    now: int
    updated_at: int | None = None  # when set, the record must not have changed since


@dataclass(frozen=True)
class Changes:
    """What a transition writes."""

    status: Status
    updated_at: int
    resume_run_id: str | None = None


class ConditionFailed(Exception):
    """A conditional transition did not hold; carries the record as it was (None if absent)."""

    def __init__(self, current: PendingRecord | None) -> None:
        super().__init__("condition failed")
        self.current = current


def holds(record: PendingRecord | None, expect: Expect) -> bool:
    """The transition condition, for backends that evaluate it in code (the DynamoDB one states it as an
    expression: both must agree, which the contract suite checks)."""
    return (
        record is not None
        and record.status == expect.status
        and record.owner == expect.owner
        and (expect.ids_key is None or record.ids_key == expect.ids_key)
        and record.expires_at > expect.now
        and (expect.updated_at is None or record.updated_at == expect.updated_at)
    )


class PendingBackend(Protocol):
    """Storage primitives. Both backends must pass tests/unit/test_store_contract.py."""

    def put(self, record: PendingRecord) -> None:
        """Store the record for its thread, replacing any previous one."""

    def get(self, key: str) -> PendingRecord | None:
        """The stored record for a thread key, expired or not (strongly consistent)."""

    def transition(self, key: str, expect: Expect, changes: Changes) -> PendingRecord:
        """Atomically apply `changes` if `expect` holds and return the new record; else raise
        ConditionFailed(current)."""

    def create_marker(self, key: str, body: dict[str, Any], expires_at: int, now: int) -> dict[str, Any] | None:
        """Store a small marker unless a live one (expiring after `now`) exists; return that one, else None."""

    def put_marker(self, key: str, body: dict[str, Any], expires_at: int) -> None:
        """Store or replace a marker."""

    def delete_marker(self, key: str) -> None:
        """Remove a marker, if any."""

    def get_item(self, pk: str, sk: str) -> dict[str, Any] | None:
        """A plain item's body (gateway keys, usage), or None."""

    def put_item(self, pk: str, sk: str, body: dict[str, Any], *, only_if_absent: bool = False) -> bool:
        """Store a plain item; with `only_if_absent`, only where none is (returns False then)."""

    def query_items(self, pk: str) -> list[tuple[str, dict[str, Any]]]:
        """All plain items of a partition as (sort key, body), by sort key."""

    def increment(self, pk: str, sk: str, counters: dict[str, int], expires_at: int | None = None) -> dict[str, int]:
        """Atomically add to an item's counters (created at zero) and return their new values."""


class ToolCallsNotFound(NotFound):
    code = "tool_calls_not_found"


class ResumeInProgress(Conflict):
    code = "resume_in_progress"


class ToolResultsAlreadySubmitted(Conflict):
    code = "tool_results_already_submitted"


class StaleResume(Exception):
    """A request claimed these tool results but never finished (its process died): Letta must say what happened."""

    def __init__(self, record: PendingRecord) -> None:
        super().__init__(record.thread_key)
        self.record = record


class ResumeUnconfirmed(Exception):
    """These tool results were claimed by a request within its lease, which records nothing more once Letta takes
    them: only Letta can tell whether that request is still running or already answered (then replay it)."""

    def __init__(self, record: PendingRecord) -> None:
        super().__init__(record.thread_key)
        self.record = record


class AlreadyAnswered(Exception):
    """These tool results were already accepted by Letta; `run_id` is the run that answered them."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id


class PendingApprovals:
    """The pause/resume policy over a backend."""

    def __init__(
        self,
        backend: PendingBackend,
        *,
        ttl_seconds: int = 86400,
        lease_seconds: int = 960,
        clock: Clock = time.time,
    ) -> None:
        self.backend = backend
        self.ttl_seconds = ttl_seconds
        # A claim older than this has no live owner: no request runs longer (Lambda's limit is 900 s).
        self.lease_seconds = lease_seconds
        self.clock = clock

    def _now(self) -> int:
        return int(self.clock())

    def save_pause(
        self,
        *,
        owner: str,
        agent_id: str,
        conversation_id: str | None,
        run_id: str | None,
        approval_message_id: str | None,
        tool_calls: Sequence[ToolCallEntry],
        answered: PendingRecord | None = None,
        answered_run_id: str | None = None,
    ) -> PendingRecord:
        """Record a pause. `answered` is the claim whose tool results led to it (answered by `answered_run_id`)."""
        now = self._now()
        record = PendingRecord(
            agent_id=agent_id,
            conversation_id=conversation_id,
            owner=owner,
            run_id=run_id,
            approval_message_id=approval_message_id,
            tool_calls=tuple(tool_calls),
            created_at=now,
            expires_at=now + self.ttl_seconds,
            updated_at=now,
            previous_ids_key=answered.ids_key if answered is not None and answered_run_id else None,
            previous_run_id=answered_run_id if answered is not None else None,
        )
        self.backend.put(record)
        return record

    def current(self, owner: str, agent_id: str, conversation_id: str | None) -> PendingRecord | None:
        """The live record of this thread visible to `owner`, if any."""
        record = self.backend.get(thread_key(agent_id, conversation_id))
        if record is None or record.owner != owner or record.expired(self._now()):
            return None
        return record

    def claim(
        self, *, owner: str, agent_id: str, conversation_id: str | None, tool_call_ids: Sequence[str]
    ) -> PendingRecord:
        """Take the pending record for these tool results, exactly once across all instances.

        Raises `AlreadyAnswered` when Letta already accepted these very results (a retry), so the caller can answer
        it again from Letta's run instead of sending anything."""
        key = thread_key(agent_id, conversation_id)
        now = self._now()
        expect = Expect(status="pending", owner=owner, ids_key=ids_key(tool_call_ids), now=now)
        try:
            return self.backend.transition(key, expect, Changes(status="resuming", updated_at=now))
        except ConditionFailed as failed:
            raise self._why(failed.current, owner, tool_call_ids, now) from None

    def _why(self, record: PendingRecord | None, owner: str, ids: Sequence[str], now: int) -> Exception:
        if record is not None and record.owner == owner and not record.expired(now):
            given = ids_key(ids)
            if record.status == "done" and record.ids_key == given and record.resume_run_id:
                return AlreadyAnswered(record.resume_run_id)
            if record.previous_ids_key == given and record.previous_run_id:
                return AlreadyAnswered(record.previous_run_id)
        if record is None or record.owner != owner or record.expired(now):
            listed = ", ".join(ids)
            return ToolCallsNotFound(
                f"No pending tool calls found for tool_call_id(s) {listed}. They may have expired or never "
                "existed for this agent.",
                param="messages",
            )
        expected = {c.id for c in record.tool_calls}
        given = set(ids)
        if expected != given:
            parts = []
            if missing := sorted(expected - given):
                parts.append(f"missing results for {', '.join(missing)}")
            if unknown := sorted(given - expected):
                parts.append(f"unknown tool_call_id(s) {', '.join(unknown)}")
            return InvalidRequest(
                "Tool results must answer every pending tool call of the agent together: " + "; ".join(parts) + ".",
                param="messages",
                code="tool_results_mismatch",
            )
        if record.status == "resuming" and now - record.updated_at > self.lease_seconds:
            return StaleResume(record)
        if record.status == "resuming":
            return ResumeUnconfirmed(record)
        return ToolResultsAlreadySubmitted(
            "These tool calls were already answered (or denied when a new message arrived); the agent has "
            "continued since.",
            param="messages",
        )

    def take_over(self, record: PendingRecord) -> PendingRecord:
        """Claim a stale resume for this request, unless another request took it over first."""
        now = self._now()
        expect = Expect(
            status="resuming", owner=record.owner, ids_key=record.ids_key, now=now, updated_at=record.updated_at
        )
        try:
            return self.backend.transition(record.thread_key, expect, Changes(status="resuming", updated_at=now))
        except ConditionFailed:
            raise ResumeInProgress(
                "These tool results are being submitted to the agent by another request. Retry shortly.",
                headers={"Retry-After": "2"},
            ) from None

    def abandon(self, owner: str, agent_id: str, conversation_id: str | None) -> PendingRecord | None:
        """Take this owner's pending record of the thread, expired or not, to deny its tool calls."""
        try:
            return self.backend.transition(
                thread_key(agent_id, conversation_id),
                Expect(status="pending", owner=owner, ids_key=None, now=0),
                Changes(status="resuming", updated_at=self._now()),
            )
        except ConditionFailed:
            return None

    def release(self, record: PendingRecord) -> None:
        """Letta did not accept the tool results: make the record consumable again."""
        now = self._now()
        expect = Expect(status="resuming", owner=record.owner, ids_key=record.ids_key, now=now)
        try:
            self.backend.transition(record.thread_key, expect, Changes(status="pending", updated_at=now))
        except ConditionFailed:
            pass

    def complete(self, record: PendingRecord, resume_run_id: str | None) -> None:
        """Letta accepted the tool results."""
        now = self._now()
        expect = Expect(status="resuming", owner=record.owner, ids_key=record.ids_key, now=now)
        done = Changes(status="done", updated_at=now, resume_run_id=resume_run_id)
        try:
            self.backend.transition(record.thread_key, expect, done)
        except ConditionFailed:
            pass


def record_to_dict(record: PendingRecord) -> dict[str, object]:
    return {
        "agent_id": record.agent_id,
        "conversation_id": record.conversation_id,
        "owner": record.owner,
        "run_id": record.run_id,
        "approval_message_id": record.approval_message_id,
        "tool_calls": [[c.id, c.name] for c in record.tool_calls],
        "created_at": record.created_at,
        "expires_at": record.expires_at,
        "status": record.status,
        "resume_run_id": record.resume_run_id,
        "updated_at": record.updated_at,
        "previous_ids_key": record.previous_ids_key,
        "previous_run_id": record.previous_run_id,
    }


def record_from_dict(data: dict) -> PendingRecord:  # type: ignore[type-arg]
    return PendingRecord(
        agent_id=data["agent_id"],
        conversation_id=data.get("conversation_id"),
        owner=data["owner"],
        run_id=data.get("run_id"),
        approval_message_id=data.get("approval_message_id"),
        tool_calls=tuple(ToolCallEntry(i, n) for i, n in data["tool_calls"]),
        created_at=int(data["created_at"]),
        expires_at=int(data["expires_at"]),
        status=data["status"],
        resume_run_id=data.get("resume_run_id"),
        updated_at=int(data.get("updated_at") or 0),
        previous_ids_key=data.get("previous_ids_key"),
        previous_run_id=data.get("previous_run_id"),
    )

"""`Idempotency-Key` for plain turns: the first request with a key runs; a retry with the same key and body is
answered again from the Letta run that served it; a different body under the same key is refused."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from ..errors import Conflict, InvalidRequest
from .base import Clock, PendingBackend


@dataclass(frozen=True)
class Started:
    key: str


@dataclass(frozen=True)
class Answered:
    run_id: str


class RequestInProgress(Conflict):
    code = "request_in_progress"


class Idempotency:
    def __init__(
        self, backend: PendingBackend, *, ttl_seconds: int = 86400, lease_seconds: int = 960, clock: Clock = time.time
    ) -> None:
        self.backend = backend
        self.ttl_seconds = ttl_seconds
        self.lease_seconds = lease_seconds  # a running request older than this died: its key may run again
        self.clock = clock

    @staticmethod
    def marker_key(owner: str, idempotency_key: str) -> str:
        return "idem#" + owner + "#" + hashlib.sha256(idempotency_key.encode()).hexdigest()

    def begin(self, owner: str, idempotency_key: str, fingerprint: str) -> Started | Answered:
        key = self.marker_key(owner, idempotency_key)
        now = int(self.clock())
        body = {"fingerprint": fingerprint, "state": "running", "started_at": now}
        existing = self.backend.create_marker(key, body, now + self.ttl_seconds, now)
        if existing is None:
            return Started(key)
        if existing.get("fingerprint") != fingerprint:
            raise InvalidRequest(
                "This Idempotency-Key was already used for a different request.",
                param="Idempotency-Key",
                code="idempotency_key_reused",
            )
        if existing.get("state") == "done":
            if existing.get("run_id"):
                return Answered(str(existing["run_id"]))
            raise Conflict("A request with this Idempotency-Key was already answered.", code="request_already_answered")
        if now - int(existing.get("started_at") or 0) > self.lease_seconds:
            self.backend.put_marker(key, body, now + self.ttl_seconds)
            return Started(key)
        raise RequestInProgress(
            "A request with this Idempotency-Key is still running. Retry shortly.", headers={"Retry-After": "2"}
        )

    def finish(self, started: Started, fingerprint: str, run_id: str | None) -> None:
        now = int(self.clock())
        body = {"fingerprint": fingerprint, "state": "done", "run_id": run_id, "started_at": now}
        self.backend.put_marker(started.key, body, now + self.ttl_seconds)

    def abort(self, started: Started) -> None:
        """Letta did not take the request: a retry with the same key may run it."""
        self.backend.delete_marker(started.key)

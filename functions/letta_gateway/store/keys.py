"""Managed gateway keys and their usage, in the state store.

A key is shown once, when created, and stored only as a keyed hash (HMAC-SHA256 with a server-side secret).
Items: `key#<hash>` / `key` (looked up on authentication), `keys` / `<name>` (listing, by name), and
`usage#<key id>` / `<day>` with atomic counters.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime

from ..errors import Conflict, InvalidRequest, NotFound
from .base import Clock, PendingBackend

KEY_PREFIX = "lgw_"
USAGE_FIELDS = ("requests", "prompt_tokens", "completion_tokens", "tool_pauses", "errors")


@dataclass(frozen=True)
class ManagedKey:
    name: str
    key_id: str
    digest: str = field(repr=False)
    created_at: int
    expires_at: int | None = None
    disabled: bool = False
    agents: tuple[str, ...] = ()
    rpm: int | None = None
    concurrency: int | None = None

    def usable(self, now: float) -> bool:
        return not self.disabled and (self.expires_at is None or self.expires_at > now)


def _from_body(body: Mapping[str, object]) -> ManagedKey:
    data = dict(body)
    data["agents"] = tuple(data.get("agents") or ())  # type: ignore[arg-type]
    return ManagedKey(**data)  # type: ignore[arg-type]


def parse_duration(text: str) -> int:
    """'30d', '12h', '90m', '3600s' (or plain seconds) as seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    text = text.strip().lower()
    try:
        if text and text[-1] in units:
            value = int(text[:-1]) * units[text[-1]]
        else:
            value = int(text)
    except ValueError:
        raise InvalidRequest(f"Not a duration: {text!r} (use e.g. 30d, 12h, 90m).") from None
    if value <= 0:
        raise InvalidRequest("Durations must be positive.")
    return value


class KeyStore:
    def __init__(self, backend: PendingBackend, secret: bytes, *, clock: Clock = time.time) -> None:
        if len(secret) < 16:
            raise ValueError("the key-hashing secret must be at least 16 bytes")
        self.backend = backend
        self._secret = secret
        self.clock = clock

    def digest(self, key: str) -> str:
        return hmac.new(self._secret, key.encode(), hashlib.sha256).hexdigest()

    def create(
        self,
        name: str,
        *,
        agents: Iterable[str] = (),
        expires_in: int | None = None,
        rpm: int | None = None,
        concurrency: int | None = None,
    ) -> tuple[str, ManagedKey]:
        """A new key, returned in plain text this once."""
        if not name or len(name) > 64 or not all(c.isalnum() or c in "-_.@" for c in name):
            raise InvalidRequest("Key names are 1-64 letters, digits, '-', '_', '.' or '@'.")
        plaintext = KEY_PREFIX + secrets.token_urlsafe(32)
        digest = self.digest(plaintext)
        now = int(self.clock())
        key = ManagedKey(
            name=name,
            key_id="key-" + digest[:16],
            digest=digest,
            created_at=now,
            expires_at=now + expires_in if expires_in else None,
            agents=tuple(a for a in agents if a),
            rpm=rpm,
            concurrency=concurrency,
        )
        if not self.backend.put_item("keys", name, asdict(key), only_if_absent=True):
            raise Conflict(f"A key named {name!r} already exists.", code="key_exists")
        self.backend.put_item(f"key#{digest}", "key", asdict(key))
        return plaintext, key

    def list(self) -> list[ManagedKey]:
        return [_from_body(body) for _, body in self.backend.query_items("keys")]

    def get(self, name: str) -> ManagedKey:
        body = self.backend.get_item("keys", name)
        if body is None:
            raise NotFound(f"No key named {name!r}.", code="key_not_found")
        return _from_body(body)

    def revoke(self, name: str) -> ManagedKey:
        key = replace(self.get(name), disabled=True)
        self.backend.put_item(f"key#{key.digest}", "key", asdict(key))
        self.backend.put_item("keys", name, asdict(key))
        return key

    def lookup(self, plaintext: str) -> ManagedKey | None:
        """The key for a presented secret; the stored hash is found by lookup and compared in constant time."""
        digest = self.digest(plaintext)
        body = self.backend.get_item(f"key#{digest}", "key")
        if body is None or not hmac.compare_digest(str(body.get("digest", "")), digest):
            return None
        return _from_body(body)

    # ----------------------------------------------------------------------------------------------- usage

    @staticmethod
    def day(now: float) -> str:
        return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d")

    def record_usage(self, key_id: str, counters: Mapping[str, int]) -> None:
        nonzero = {k: int(v) for k, v in counters.items() if v}
        if nonzero:
            self.backend.increment(f"usage#{key_id}", self.day(self.clock()), nonzero)

    def usage(self, key_id: str) -> list[tuple[str, dict[str, int]]]:
        return [
            (day, {f: int(body.get(f, 0)) for f in USAGE_FIELDS})
            for day, body in self.backend.query_items(f"usage#{key_id}")
        ]

    # ------------------------------------------------------------------------------------------ rate limits

    def count_request(self, key_id: str) -> tuple[int, int]:
        """This minute's request count for the key, after counting this one, and seconds until the minute ends."""
        now = self.clock()
        minute = int(now // 60)
        count = self.backend.increment(f"rate#{key_id}", str(minute), {"requests": 1}, (minute + 2) * 60)
        return count["requests"], int((minute + 1) * 60 - now) + 1

    def enter(self, key_id: str) -> int:
        """Count a request in flight; returns how many are in flight now, this one included."""
        now = int(self.clock())
        return self.backend.increment(f"inflight#{key_id}", "now", {"requests": 1}, now + 900)["requests"]

    def leave(self, key_id: str) -> None:
        self.backend.increment(f"inflight#{key_id}", "now", {"requests": -1}, int(self.clock()) + 900)

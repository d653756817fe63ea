"""Bootstrap gateway API keys (from configuration): kept only as SHA-256 digests, compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import AuthenticationFailed


@dataclass(frozen=True)
class Principal:
    """The caller. `key_id` is a stable, non-secret name for the key (owner of pending tool calls, logs).
    `agents` limits which agents it may use (ids or names; None = all)."""

    key_id: str
    name: str | None = None
    agents: frozenset[str] | None = None
    rpm: int | None = None
    concurrency: int | None = None

    def allows(self, agent_id: str, agent_name: str) -> bool:
        return self.agents is None or agent_id in self.agents or agent_name in self.agents


def bearer_token(authorization: str | None) -> str:
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthenticationFailed(
            "Missing API key: send 'Authorization: Bearer <gateway key>'.", code="missing_api_key"
        )
    return token


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def key_id_of(key: str) -> str:
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:16]


class KeyRing:
    def __init__(self, keys: Iterable[str] = ()) -> None:
        self._entries: list[tuple[bytes, Principal]] = []
        self.replace(keys)

    def replace(self, keys: Iterable[str]) -> None:
        self._entries = [(_digest(k), Principal(key_id_of(k))) for k in keys if k]

    def authenticate(self, token: str) -> Principal | None:
        """The bootstrap key matching `token`, if any."""
        digest = _digest(token)
        found: Principal | None = None
        for expected, principal in self._entries:
            if hmac.compare_digest(expected, digest):
                found = principal
        return found

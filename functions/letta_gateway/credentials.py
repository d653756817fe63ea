"""Where the gateway keys and the Letta key come from: the environment locally, a Secrets Manager secret in AWS
(JSON with `letta_api_key` and `gateway_api_keys`), re-read at most every `max_age` seconds."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .errors import ConfigurationError, UpstreamError
from .settings import Settings


@dataclass(frozen=True)
class Credentials:
    letta_api_key: str | None = field(repr=False)
    gateway_api_keys: tuple[str, ...] = field(repr=False)
    key_secret: str | None = field(default=None, repr=False)  # hashes managed keys


class CredentialSource(Protocol):
    async def get(self) -> Credentials: ...


class StaticCredentials:
    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials

    async def get(self) -> Credentials:
        return self._credentials


def parse_secret(value: Any, fallback: Credentials) -> Credentials:
    if not isinstance(value, dict):
        raise ConfigurationError("The gateway secret must be a JSON object with 'gateway_api_keys'.")
    raw_keys = value.get("gateway_api_keys", "")
    if isinstance(raw_keys, str):
        keys = tuple(k.strip() for k in raw_keys.split(",") if k.strip())
    else:
        keys = tuple(str(k).strip() for k in raw_keys if str(k).strip())
    return Credentials(
        letta_api_key=value.get("letta_api_key") or fallback.letta_api_key,
        gateway_api_keys=keys + fallback.gateway_api_keys,
        key_secret=value.get("key_hashing_secret") or fallback.key_secret,
    )


class SecretsManagerCredentials:
    def __init__(
        self,
        secret_id: str,
        fallback: Credentials,
        *,
        max_age: float = 300.0,
        fetch: Callable[[str], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.secret_id = secret_id
        self.fallback = fallback
        self.max_age = max_age
        self._fetch = fetch or self._powertools_fetch
        self._clock = clock
        self._cached: tuple[float, Credentials] | None = None

    @staticmethod
    def _powertools_fetch(secret_id: str) -> Any:
        from aws_lambda_powertools.utilities import parameters

        return parameters.get_secret(secret_id, transform="json", max_age=0)

    async def get(self) -> Credentials:
        now = self._clock()
        if self._cached is not None and self._cached[0] > now:
            return self._cached[1]
        try:
            value = await asyncio.to_thread(self._fetch, self.secret_id)
        except ConfigurationError:
            raise
        except Exception:
            if self._cached is not None:
                return self._cached[1]
            raise UpstreamError("The gateway could not read its secret.", code="secret_unavailable") from None
        credentials = parse_secret(value, self.fallback)
        self._cached = (now + self.max_age, credentials)
        return credentials


def local_key_secret(settings: Settings) -> str | None:
    """GATEWAY_KEY_SECRET, or for the local SQLite store a secret generated once beside it (mode 0600)."""
    if settings.key_secret:
        return settings.key_secret
    if settings.state_table:
        return None
    path = os.path.join(os.path.dirname(os.path.abspath(settings.state_path)), "key-secret")
    try:
        with open(path) as handle:
            return handle.read().strip() or None
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    secret = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        with open(path) as handle:
            return handle.read().strip() or None
    with os.fdopen(fd, "w") as handle:
        handle.write(secret)
    return secret


def credential_source(settings: Settings) -> CredentialSource:
    local = Credentials(settings.letta_api_key, settings.gateway_api_keys, local_key_secret(settings))
    if settings.secret_id:
        return SecretsManagerCredentials(settings.secret_id, local)
    return StaticCredentials(local)

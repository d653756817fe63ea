"""Configuration, read once from the environment."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import ConfigurationError

LETTA_CLOUD_URL = "https://api.letta.com"


def _int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigurationError(f"{name} must be at least {minimum}, got {value}")
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number, got {raw!r}") from None
    if value <= 0:
        raise ConfigurationError(f"{name} must be positive, got {raw!r}")
    return value


def _bool(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ConfigurationError(f"{name} must be true or false, got {raw!r}")


def _patterns(env: Mapping[str, str]) -> tuple[str, ...] | None:
    raw = env.get("GATEWAY_SIDE_REQUEST_PATTERNS", "").strip()
    if not raw:
        return None
    if raw.lower() == "off":
        return ()
    try:
        patterns = json.loads(raw)
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            raise ValueError
        for pattern in patterns:
            re.compile(pattern)
    except (ValueError, re.error):
        raise ConfigurationError(
            "GATEWAY_SIDE_REQUEST_PATTERNS must be 'off' or a JSON list of regular expressions."
        ) from None
    return tuple(patterns)


def _system_prompt_policy(env: Mapping[str, str]) -> int | None:
    policy = (env.get("GATEWAY_SYSTEM_PROMPT") or "ignore").strip().lower()
    if policy == "ignore":
        return None
    if policy != "memory_block":
        raise ConfigurationError(f"GATEWAY_SYSTEM_PROMPT must be 'ignore' or 'memory_block', got {policy!r}")
    return _int(env, "GATEWAY_SYSTEM_PROMPT_MAX_CHARS", 20000, minimum=200)


HTTP_CLIENTS = ("auto", "aiohttp", "httpx")
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def _http_client(env: Mapping[str, str]) -> str:
    """`aiohttp` (faster, the default where it is installed) or `httpx` (the Lambda layer; proxies from the
    environment, which the aiohttp transport ignores)."""
    choice = (env.get("LETTA_HTTP_CLIENT") or "auto").strip().lower()
    if choice not in HTTP_CLIENTS:
        raise ConfigurationError(f"LETTA_HTTP_CLIENT must be auto, aiohttp or httpx, got {choice!r}")
    if choice != "auto":
        if choice == "aiohttp" and importlib.util.find_spec("httpx_aiohttp") is None:
            raise ConfigurationError(
                "LETTA_HTTP_CLIENT=aiohttp needs the aiohttp extra: pip install 'letta-client[aiohttp]'"
            )
        return choice
    if any(env.get(name) for name in PROXY_VARIABLES):
        return "httpx"
    return "aiohttp" if importlib.util.find_spec("httpx_aiohttp") is not None else "httpx"


def _completion_tool(env: Mapping[str, str]) -> str | None:
    raw = env.get("GATEWAY_COMPLETION_TOOL")
    if raw is None:
        return "attempt_completion"
    raw = raw.strip()
    return None if raw.lower() in ("", "off", "none", "false") else raw


@dataclass(frozen=True)
class Settings:
    letta_base_url: str = LETTA_CLOUD_URL
    letta_api_key: str | None = field(default=None, repr=False)
    gateway_api_keys: tuple[str, ...] = field(default=(), repr=False)
    key_secret: str | None = field(default=None, repr=False)
    key_cache_seconds: float = 30.0
    record_usage: bool = True
    completion_tool: str | None = "attempt_completion"
    side_request_patterns: tuple[str, ...] | None = None  # None: the built-in rules
    reasoning_alias: bool = False
    system_prompt_block: int | None = None
    thread_mode: str = "agent"
    secret_id: str | None = None
    state_table: str | None = None
    state_path: str = ".gateway/state.sqlite3"
    pending_ttl_seconds: int = 86400
    model_cache_seconds: float = 30.0
    max_body_bytes: int = 6 * 1024 * 1024
    letta_timeout_seconds: float = 600.0
    letta_http_client: str = field(default_factory=lambda: _http_client({}))
    deadline_seconds: float | None = None
    deadline_margin_seconds: float = 2.0
    keepalive_seconds: float = 10.0
    deny_unknown_approvals: bool = False
    log_level: str = "INFO"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        keys = tuple(k.strip() for k in env.get("GATEWAY_API_KEYS", "").split(",") if k.strip())
        settings = cls(
            letta_base_url=(env.get("LETTA_BASE_URL") or LETTA_CLOUD_URL).rstrip("/"),
            letta_api_key=env.get("LETTA_API_KEY") or None,
            gateway_api_keys=keys,
            key_secret=env.get("GATEWAY_KEY_SECRET") or None,
            key_cache_seconds=_float(env, "GATEWAY_KEY_CACHE_SECONDS", 30.0),
            record_usage=_bool(env, "GATEWAY_USAGE", default=True),
            completion_tool=_completion_tool(env),
            side_request_patterns=_patterns(env),
            reasoning_alias=_bool(env, "GATEWAY_REASONING_ALIAS"),
            system_prompt_block=_system_prompt_policy(env),
            thread_mode=(env.get("GATEWAY_THREADS") or "agent").strip().lower(),
            secret_id=env.get("GATEWAY_SECRET_ID") or None,
            state_table=env.get("GATEWAY_STATE_TABLE") or None,
            state_path=env.get("GATEWAY_STATE_PATH") or ".gateway/state.sqlite3",
            pending_ttl_seconds=_int(env, "GATEWAY_PENDING_TTL_SECONDS", 86400, minimum=60),
            model_cache_seconds=_float(env, "GATEWAY_MODEL_CACHE_SECONDS", 30.0),
            max_body_bytes=_int(env, "GATEWAY_MAX_BODY_BYTES", 6 * 1024 * 1024, minimum=1024),
            letta_timeout_seconds=_float(env, "LETTA_TIMEOUT_SECONDS", 600.0),
            letta_http_client=_http_client(env),
            deadline_seconds=_float(env, "GATEWAY_DEADLINE_SECONDS", 0.0) or None,
            deadline_margin_seconds=_float(env, "GATEWAY_DEADLINE_MARGIN_SECONDS", 2.0),
            keepalive_seconds=_float(env, "GATEWAY_KEEPALIVE_SECONDS", 10.0),
            deny_unknown_approvals=_bool(env, "GATEWAY_DENY_UNKNOWN_APPROVALS"),
            log_level=(env.get("GATEWAY_LOG_LEVEL") or env.get("POWERTOOLS_LOG_LEVEL") or "INFO").upper(),
        )
        settings.validate()
        return settings

    def validate(self) -> None:
        if not self.letta_base_url.startswith(("http://", "https://")):
            raise ConfigurationError(f"LETTA_BASE_URL must be an http(s) URL, got {self.letta_base_url!r}")
        if not self.gateway_api_keys and not self.secret_id:
            raise ConfigurationError(
                "No gateway API keys configured: set GATEWAY_API_KEYS (comma-separated keys clients send as "
                "'Authorization: Bearer <key>') or GATEWAY_SECRET_ID (a Secrets Manager secret with "
                "'gateway_api_keys'). Managed keys (letta-gateway keys create) come on top of these."
            )
        if self.key_secret is not None and len(self.key_secret) < 16:
            raise ConfigurationError("GATEWAY_KEY_SECRET must be at least 16 characters.")
        if self.thread_mode not in ("agent", "auto"):
            raise ConfigurationError(f"GATEWAY_THREADS must be 'agent' or 'auto', got {self.thread_mode!r}")
        if self.key_cache_seconds > 60:
            raise ConfigurationError("GATEWAY_KEY_CACHE_SECONDS must be at most 60 (revocation delay).")
        if self.letta_base_url == LETTA_CLOUD_URL and not self.letta_api_key and not self.secret_id:
            raise ConfigurationError(
                "LETTA_API_KEY is required for Letta Cloud (or set LETTA_BASE_URL to your own Letta server)."
            )
        if self.log_level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ConfigurationError(f"GATEWAY_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR, got {self.log_level!r}")

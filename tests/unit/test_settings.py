"""Configuration is read once and fails early with what to set; secrets come from the env or Secrets Manager."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from letta_gateway.credentials import Credentials, SecretsManagerCredentials, credential_source
from letta_gateway.errors import ConfigurationError, UpstreamError
from letta_gateway.settings import LETTA_CLOUD_URL, Settings

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_for_a_local_server() -> None:
    settings = Settings.from_env({"GATEWAY_API_KEYS": " k1, k2 ,", "LETTA_BASE_URL": "http://127.0.0.1:8283/"})
    assert settings == Settings(letta_base_url="http://127.0.0.1:8283", gateway_api_keys=("k1", "k2"))
    assert "k1" not in repr(settings)


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({}, "GATEWAY_API_KEYS"),
        ({"GATEWAY_API_KEYS": "k"}, "LETTA_API_KEY"),
        ({"GATEWAY_API_KEYS": "k", "LETTA_BASE_URL": "ftp://x"}, "LETTA_BASE_URL"),
        (
            {"GATEWAY_API_KEYS": "k", "LETTA_API_KEY": "l", "GATEWAY_PENDING_TTL_SECONDS": "soon"},
            "GATEWAY_PENDING_TTL_SECONDS",
        ),
        (
            {"GATEWAY_API_KEYS": "k", "LETTA_API_KEY": "l", "GATEWAY_PENDING_TTL_SECONDS": "5"},
            "GATEWAY_PENDING_TTL_SECONDS",
        ),
        ({"GATEWAY_API_KEYS": "k", "LETTA_API_KEY": "l", "LETTA_TIMEOUT_SECONDS": "-1"}, "LETTA_TIMEOUT_SECONDS"),
        ({"GATEWAY_API_KEYS": "k", "LETTA_API_KEY": "l", "GATEWAY_LOG_LEVEL": "loud"}, "GATEWAY_LOG_LEVEL"),
    ],
)
def test_invalid_configuration_says_what_to_set(env: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        Settings.from_env(env)
    assert fragment in str(info.value)


LOCAL = {"GATEWAY_API_KEYS": "k", "LETTA_BASE_URL": "http://127.0.0.1:8283"}


@pytest.mark.parametrize(
    ("env", "transport"),
    [
        ({}, "aiohttp"),  # installed with the package (letta-client[aiohttp])
        ({"LETTA_HTTP_CLIENT": "httpx"}, "httpx"),
        ({"LETTA_HTTP_CLIENT": " AIOHTTP "}, "aiohttp"),
        ({"HTTPS_PROXY": "http://proxy:3128"}, "httpx"),  # aiohttp's transport would ignore the proxy
        ({"all_proxy": "socks5://proxy:1080"}, "httpx"),
        ({"HTTPS_PROXY": "http://proxy:3128", "LETTA_HTTP_CLIENT": "aiohttp"}, "aiohttp"),
    ],
)
def test_letta_transport(env: dict[str, str], transport: str) -> None:
    assert Settings.from_env({**LOCAL, **env}).letta_http_client == transport


def test_unknown_letta_transport_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="LETTA_HTTP_CLIENT must be auto, aiohttp or httpx"):
        Settings.from_env({**LOCAL, "LETTA_HTTP_CLIENT": "requests"})


def test_secret_id_alone_is_enough_in_aws() -> None:
    settings = Settings.from_env({"GATEWAY_SECRET_ID": "arn:aws:secretsmanager:us-east-1:1:secret:gw"})
    assert settings.letta_base_url == LETTA_CLOUD_URL
    assert isinstance(credential_source(settings), SecretsManagerCredentials)


def test_secrets_manager_credentials_are_cached_and_merged() -> None:
    import boto3
    from moto import mock_aws

    with mock_aws():
        sm = boto3.client("secretsmanager", region_name="us-east-1")
        arn = sm.create_secret(
            Name="gw", SecretString=json.dumps({"letta_api_key": "letta-k", "gateway_api_keys": "a1,a2"})
        )["ARN"]
        now = [0.0]
        source = SecretsManagerCredentials(arn, Credentials(None, ("boot",)), max_age=60, clock=lambda: now[0])
        first = asyncio.run(source.get())
        assert first == Credentials("letta-k", ("a1", "a2", "boot"))
        sm.put_secret_value(SecretId=arn, SecretString=json.dumps({"gateway_api_keys": ["b1"]}))
        assert asyncio.run(source.get()) is first  # cached
        now[0] = 61
        assert asyncio.run(source.get()) == Credentials(None, ("b1", "boot"))


def test_unreadable_secret_is_an_upstream_error_not_a_crash() -> None:
    def fail(_: str) -> object:
        raise RuntimeError("AccessDenied")

    source = SecretsManagerCredentials("gw", Credentials(None, ()), fetch=fail)
    with pytest.raises(UpstreamError) as info:
        asyncio.run(source.get())
    assert info.value.code == "secret_unavailable"


def test_lambda_module_import_does_no_network_and_loads_no_letta_client() -> None:
    code = (
        "import socket, sys\n"
        "def deny(*a, **k): raise SystemExit('network call at import')\n"
        "socket.socket.connect = deny\n"
        "import letta_gateway.handler\n"
        "print(sorted(m for m in ('letta_client', 'boto3', 'uvicorn') if m in sys.modules))\n"
    )
    env = {**os.environ, "GATEWAY_API_KEYS": "k", "LETTA_API_KEY": "l", "PYTHONPATH": str(ROOT / "functions")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_lambda_module_with_bad_configuration_fails_at_init() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "LETTA_"))}
    env["PYTHONPATH"] = str(ROOT / "functions")
    out = subprocess.run(
        [sys.executable, "-c", "import letta_gateway.handler"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode != 0 and "GATEWAY_API_KEYS" in out.stderr

"""Managed keys: stored hashed, scoped to agents, revocable, metered per day, optionally rate limited."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import openai
import pytest

from letta_gateway.errors import Conflict, InvalidRequest
from letta_gateway.store import PendingBackend
from letta_gateway.store.keys import KeyStore, parse_duration
from tests.conftest import KEY_SECRET, make_gateway
from tests.support.letta_double import LettaDouble

ROOT = Path(__file__).resolve().parents[2]
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}}}]


class Clock:
    now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def keys(backend_factory: Callable[[], PendingBackend]) -> KeyStore:
    return KeyStore(backend_factory(), KEY_SECRET.encode(), clock=Clock())


# --------------------------------------------------------------------------------------- store contract


def test_keys_are_stored_only_as_keyed_hashes(keys: KeyStore) -> None:
    plaintext, key = keys.create("alice", agents=["coder", ""], expires_in=parse_duration("30d"), rpm=10)
    assert plaintext.startswith("lgw_") and len(plaintext) > 40
    assert keys.lookup(plaintext) == key and keys.lookup(plaintext + "x") is None
    assert key.agents == ("coder",) and key.expires_at == key.created_at + 30 * 86400 and key.rpm == 10
    stored = json.dumps([body for _, body in keys.backend.query_items("keys")])
    assert plaintext not in stored and plaintext[4:20] not in stored
    other = KeyStore(keys.backend, b"another-secret-of-enough-length")
    assert other.lookup(plaintext) is None  # the hash depends on the server-side secret


def test_names_are_unique_and_listed(keys: KeyStore) -> None:
    keys.create("alice")
    keys.create("bob")
    with pytest.raises(Conflict) as info:
        keys.create("alice")
    assert info.value.code == "key_exists"
    assert [k.name for k in keys.list()] == ["alice", "bob"]


def test_revoke_disables_the_key(keys: KeyStore) -> None:
    plaintext, _ = keys.create("alice")
    keys.revoke("alice")
    found = keys.lookup(plaintext)
    assert found is not None and found.disabled and not found.usable(time.time())
    assert keys.get("alice").disabled


def test_usage_counters_are_atomic(keys: KeyStore) -> None:
    def hammer() -> None:
        for _ in range(20):
            keys.record_usage("key-x", {"requests": 1, "prompt_tokens": 10, "errors": 0})

    threads = [threading.Thread(target=hammer) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert keys.usage("key-x") == [
        ("2027-01-15", {"requests": 100, "prompt_tokens": 1000, "completion_tokens": 0, "tool_pauses": 0, "errors": 0})
    ]


def test_durations() -> None:
    assert [parse_duration(d) for d in ("30d", "12h", "90m", "45s", "2w", "60")] == [
        2592000,
        43200,
        5400,
        45,
        1209600,
        60,
    ]
    with pytest.raises(InvalidRequest):
        parse_duration("soon")


# ------------------------------------------------------------------------------------------ the gateway


@pytest.fixture
def team(serve: Callable[..., str], letta_url: str, backend_factory: Callable[[], PendingBackend], letta: LettaDouble):
    backend = backend_factory()
    store = KeyStore(backend, KEY_SECRET.encode())
    url = serve(make_gateway(letta_url, backend, key_secret=KEY_SECRET, key_cache=0.2))
    return url, store


def client_for(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def test_a_key_sees_and_uses_only_its_agents(team, letta: LettaDouble) -> None:
    url, store = team
    coder, secret_agent = letta.add_agent("coder"), letta.add_agent("secret")
    scoped, _ = store.create("alice", agents=["coder"])
    by_id, _ = store.create("bob", agents=[secret_agent.id])
    with client_for(url, scoped) as alice, client_for(url, by_id) as bob:
        assert [m.id for m in alice.models.list().data] == ["coder"]
        assert [m.id for m in bob.models.list().data] == ["secret"]
        assert (
            alice.chat.completions.create(model="coder", messages=[{"role": "user", "content": "SAY:ok"}])
            .choices[0]
            .message.content
            == "ok"
        )
        for model in ("secret", secret_agent.id, "missing"):
            with pytest.raises(openai.NotFoundError) as info:
                alice.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}])
            assert info.value.body["code"] == "model_not_found"
        with pytest.raises(openai.NotFoundError):
            alice.models.retrieve("secret")
    assert letta.message_posts(secret_agent.id) == [] and len(letta.message_posts(coder.id)) == 1


def test_tool_calls_of_one_key_are_invisible_to_another(team, letta: LettaDouble) -> None:
    url, store = team
    letta.add_agent("coder")
    alice_key, _ = store.create("alice")
    bob_key, _ = store.create("bob")
    with client_for(url, alice_key) as alice, client_for(url, bob_key) as bob:
        messages = [{"role": "user", "content": "CALL:read_file {}"}]
        first = alice.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
        call = first.choices[0].message.tool_calls[0]
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "R"},
        ]
        with pytest.raises(openai.NotFoundError) as info:
            bob.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
        assert "alice" not in info.value.response.text
        assert (
            alice.chat.completions.create(model="coder", messages=messages, tools=TOOLS).choices[0].finish_reason
            == "stop"
        )


def test_revocation_takes_effect_within_the_cache_ttl(team, letta: LettaDouble) -> None:
    url, store = team
    letta.add_agent("coder")
    key, _ = store.create("carol")
    with client_for(url, key) as carol:
        carol.models.list()
        store.revoke("carol")
        time.sleep(0.3)
        with pytest.raises(openai.AuthenticationError) as info:
            carol.models.list()
    assert info.value.body["code"] == "api_key_revoked"


def test_expired_keys_are_refused(team, letta: LettaDouble) -> None:
    url, store = team
    store.clock = lambda: time.time() - 100
    key, _ = store.create("dave", expires_in=10)
    with client_for(url, key) as dave, pytest.raises(openai.AuthenticationError):
        dave.models.list()


def test_usage_is_recorded_for_streamed_and_plain_requests(team, letta: LettaDouble) -> None:
    url, store = team
    letta.add_agent("coder")
    key, managed = store.create("erin")
    with client_for(url, key) as erin:
        messages = [{"role": "user", "content": "CALL:read_file {}"}]
        first = erin.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
        call = first.choices[0].message.tool_calls[0]
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "R"},
        ]
        for _ in erin.chat.completions.create(
            model="coder", messages=messages, tools=TOOLS, stream=True, stream_options={"include_usage": True}
        ):
            pass
        with pytest.raises(openai.NotFoundError):
            erin.chat.completions.create(model="nobody", messages=[{"role": "user", "content": "x"}])
    time.sleep(0.2)  # recorded after the response is sent
    [(_, usage)] = store.usage(managed.key_id)
    assert usage == {"requests": 3, "prompt_tokens": 20, "completion_tokens": 10, "tool_pauses": 1, "errors": 1}


def test_requests_per_minute_limit(team, letta: LettaDouble) -> None:
    url, store = team
    letta.add_agent("coder")
    key, _ = store.create("frank", rpm=2)
    with client_for(url, key) as frank:
        frank.models.list()
        frank.models.list()
        with pytest.raises(openai.RateLimitError) as info:
            frank.models.list()
    headers = info.value.response.headers
    assert headers["x-ratelimit-limit-requests"] == "2" and headers["x-ratelimit-remaining-requests"] == "0"
    assert 0 < int(headers["retry-after"]) <= 61


def test_concurrency_limit(team, letta: LettaDouble) -> None:
    url, store = team
    letta.add_agent("coder")
    letta.delay = 0.5
    key, _ = store.create("gina", concurrency=1)

    async def one(client: openai.AsyncOpenAI) -> str:
        try:
            await client.chat.completions.create(model="coder", messages=[{"role": "user", "content": "x"}])
            return "ok"
        except openai.RateLimitError as error:
            return error.body["code"]

    async def main() -> list[str]:
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0) as client:
            await client.models.list()  # resolve the key before the race
            return await asyncio.gather(one(client), one(client))

    assert sorted(asyncio.run(main())) == ["concurrency_limit_exceeded", "ok"]
    with client_for(url, key) as gina:  # the slot was given back
        assert gina.chat.completions.create(model="coder", messages=[{"role": "user", "content": "SAY:x"}])


# ------------------------------------------------------------------------------------------------- CLI


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "letta_gateway.cli", "keys", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT / "functions"), **env},
    )


def test_cli_against_the_local_store(
    tmp_path: Path, serve: Callable[..., str], letta_url: str, letta: LettaDouble
) -> None:
    env = {"GATEWAY_STATE_PATH": str(tmp_path / "state.sqlite3")}
    env.pop("GATEWAY_KEY_SECRET", None)
    created = cli("create", "--name", "hank", "--agents", "coder", "--expires", "7d", env=env)
    assert created.returncode == 0, created.stderr
    plaintext = created.stdout.strip()
    assert plaintext.startswith("lgw_") and (tmp_path / "key-secret").stat().st_mode & 0o777 == 0o600
    listed = cli("list", env=env)
    assert plaintext not in listed.stdout and json.loads(listed.stdout)["agents"] == ["coder"]
    # the gateway serving that store accepts it (the secret is the generated one beside the store)
    from letta_gateway.credentials import local_key_secret
    from letta_gateway.settings import Settings
    from letta_gateway.store.sqlite import SQLiteBackend

    secret = local_key_secret(Settings(state_path=env["GATEWAY_STATE_PATH"], gateway_api_keys=("x",)))
    letta.add_agent("coder")
    url = serve(make_gateway(letta_url, SQLiteBackend(env["GATEWAY_STATE_PATH"]), key_secret=secret))
    with client_for(url, plaintext) as hank:
        assert [m.id for m in hank.models.list().data] == ["coder"]
    time.sleep(0.2)
    usage = cli("usage", "hank", env=env)
    assert usage.returncode == 0 and usage.stdout.splitlines()[1].split("\t")[2] == "1"
    assert cli("revoke", "hank", env=env).returncode == 0
    assert json.loads(cli("list", env=env).stdout)["disabled"] is True
    missing = cli("revoke", "nobody", env=env)
    assert missing.returncode == 2 and "nobody" in missing.stderr


def test_cli_against_a_dynamodb_table(dynamodb_client, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from letta_gateway import cli as gateway_cli
    from letta_gateway.store import dynamodb as ddb

    monkeypatch.setenv("GATEWAY_KEY_SECRET", KEY_SECRET)
    monkeypatch.setattr(ddb.DynamoDBBackend, "client", property(lambda self: dynamodb_client))
    assert gateway_cli.main(["keys", "--table", "letta-gateway-test", "create", "--name", "ivy"]) == 0
    plaintext = capsys.readouterr().out.strip()
    assert gateway_cli.main(["keys", "--table", "letta-gateway-test", "list"]) == 0
    listed = capsys.readouterr().out
    assert '"name": "ivy"' in listed and plaintext not in listed
    store = KeyStore(ddb.DynamoDBBackend("letta-gateway-test", client=dynamodb_client), KEY_SECRET.encode())
    assert store.lookup(plaintext) is not None

"""The client's system prompt: ignored by default, or kept in a dedicated memory block, written only on change."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import openai
import pytest

from letta_gateway.settings import Settings
from tests.conftest import ALICE, make_gateway
from tests.support.letta_double import LettaDouble


@pytest.fixture
def keeping(serve: Callable[..., str], letta_url: str, backend_factory) -> Callable[[int], str]:
    def start(limit: int = 20000) -> str:
        gateway = make_gateway(letta_url, backend_factory())
        gateway.options = replace(gateway.options, system_prompt_block=limit)
        return serve(gateway)

    return start


def ask(url: str, system: str, text: str = "SAY:ok") -> None:
    with openai.OpenAI(base_url=f"{url}/v1", api_key=ALICE, max_retries=0) as client:
        client.chat.completions.create(
            model="coder", messages=[{"role": "system", "content": system}, {"role": "user", "content": text}]
        )


def test_the_system_prompt_is_kept_in_a_memory_block_written_only_on_change(keeping, letta: LettaDouble) -> None:
    agent = letta.add_agent("coder")
    url = keeping()
    ask(url, "Use tabs. Be terse.")
    ask(url, "Use tabs. Be terse.")
    assert agent.blocks == {"client_system_prompt": "Use tabs. Be terse."} and letta.block_writes == 1
    ask(keeping(), "Use tabs. Be terse.")  # another instance: the hash in the state store says it is unchanged
    assert letta.block_writes == 1
    ask(url, "Use spaces now.")
    assert agent.blocks["client_system_prompt"] == "Use spaces now." and letta.block_writes == 2
    assert all("Use" not in str(m["messages"]) for m in letta.message_posts(agent.id))  # never sent as a message


def test_the_block_is_bounded(keeping, letta: LettaDouble) -> None:
    agent = letta.add_agent("coder")
    ask(keeping(limit=300), "x" * 1000)
    kept = agent.blocks["client_system_prompt"]
    assert len(kept) <= 300 and kept.endswith("[... truncated by the gateway ...]")


def test_ignored_by_default(client: openai.OpenAI, letta: LettaDouble) -> None:
    agent = letta.add_agent("coder")
    client.chat.completions.create(
        model="coder", messages=[{"role": "system", "content": "rules"}, {"role": "user", "content": "SAY:ok"}]
    )
    assert agent.blocks == {} and letta.block_writes == 0


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"GATEWAY_SYSTEM_PROMPT": "memory_block"}, 20000),
        ({"GATEWAY_SYSTEM_PROMPT": "memory_block", "GATEWAY_SYSTEM_PROMPT_MAX_CHARS": "5000"}, 5000),
    ],
)
def test_policy_setting(env: dict[str, str], expected: int | None) -> None:
    settings = Settings.from_env({"GATEWAY_API_KEYS": "k", "LETTA_API_KEY": "l", **env})
    assert settings.system_prompt_block == expected

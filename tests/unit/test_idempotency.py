"""`Idempotency-Key` on plain turns: a retry is answered from the first request's Letta run, never sent again."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from tests.conftest import ALICE, BOB
from tests.support.letta_double import LettaDouble


def ask(client: openai.OpenAI, text: str, key: str, **options: object):
    return client.chat.completions.create(
        model="coder", messages=[{"role": "user", "content": text}], extra_headers={"Idempotency-Key": key}, **options
    )


def test_a_retry_with_the_same_key_is_answered_without_reaching_letta(
    client: openai.OpenAI, letta: LettaDouble
) -> None:
    agent = letta.add_agent("coder")
    first = ask(client, "SAY:only once", "key-1")
    again = ask(client, "SAY:only once", "key-1")
    streamed = "".join(
        c.choices[0].delta.content or "" for c in ask(client, "SAY:only once", "key-1", stream=True) if c.choices
    )
    assert first.choices[0].message.content == again.choices[0].message.content == streamed == "only once"
    assert len(letta.message_posts(agent.id)) == 1
    sent = letta.message_posts(agent.id)[0]["messages"][0]
    assert sent["otid"].startswith("message-")  # Letta can recognise the retry as well


def test_a_different_request_under_the_same_key_is_refused(client: openai.OpenAI, letta: LettaDouble) -> None:
    letta.add_agent("coder")
    ask(client, "SAY:one", "key-2")
    with pytest.raises(openai.BadRequestError) as info:
        ask(client, "SAY:two", "key-2")
    assert info.value.body["code"] == "idempotency_key_reused"


def test_keys_belong_to_their_gateway_key(gateway_url: str, client: openai.OpenAI, letta: LettaDouble) -> None:
    agent = letta.add_agent("coder")
    ask(client, "SAY:alice", "shared-key")
    with openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=BOB, max_retries=0) as bob:
        assert ask(bob, "SAY:bob", "shared-key").choices[0].message.content == "bob"
    assert len(letta.message_posts(agent.id)) == 2


def test_a_request_letta_did_not_take_can_be_retried(client: openai.OpenAI, letta: LettaDouble) -> None:
    agent = letta.add_agent("coder")
    letta.fail_next(503, {"detail": "down"})
    with pytest.raises(openai.InternalServerError):
        ask(client, "SAY:eventually", "key-3")
    assert ask(client, "SAY:eventually", "key-3").choices[0].message.content == "eventually"
    assert len(letta.message_posts(agent.id)) == 2


def test_concurrent_retries_run_once(gateway_url: str, letta: LettaDouble) -> None:
    agent = letta.add_agent("coder")
    letta.delay = 0.3

    async def submit(client: openai.AsyncOpenAI) -> str:
        try:
            reply = await client.chat.completions.create(
                model="coder",
                messages=[{"role": "user", "content": "SAY:once"}],
                extra_headers={"Idempotency-Key": "key-4"},
            )
            return reply.choices[0].message.content
        except openai.ConflictError as error:
            return error.body["code"]

    async def main() -> list[str]:
        async with openai.AsyncOpenAI(base_url=f"{gateway_url}/v1", api_key=ALICE, max_retries=0) as client:
            return await asyncio.gather(*(submit(client) for _ in range(5)))

    outcomes = asyncio.run(main())
    assert "once" in outcomes and set(outcomes) <= {"once", "request_in_progress"}
    assert len(letta.message_posts(agent.id)) == 1


def test_overlong_key_is_400(gateway_url: str, letta: LettaDouble) -> None:
    letta.add_agent("coder")
    response = httpx.post(
        f"{gateway_url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {ALICE}", "Idempotency-Key": "k" * 300},
        json={"model": "coder", "messages": [{"role": "user", "content": "x"}]},
    )
    assert response.status_code == 400 and response.json()["error"]["param"] == "Idempotency-Key"

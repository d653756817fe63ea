"""A resume costs one conditional write: the claim. What happened after it is Letta's to tell, and only a retry asks.

DynamoDB operations are counted on the table client (moto), for the thread's pending record only (usage counters
are a separate, optional write per request)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from letta_gateway.store.base import thread_key
from letta_gateway.store.dynamodb import DynamoDBBackend
from tests.conftest import ALICE, TABLE, make_gateway
from tests.support.letta_double import LettaDouble

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture
def thread_ops(dynamodb_client: Any) -> Iterator[list[tuple[str, str]]]:
    """(operation, outcome) of every call on a thread's pending record."""
    ops: list[tuple[str, str]] = []

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        key = params.get("Key") or params.get("Item") or {}
        if str(key.get("pk", {}).get("S", "")).startswith("thread#"):
            ops.append((model.name, "sent"))

    def failed(http_response: Any, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        code = parsed.get("Error", {}).get("Code")
        if code and ops and ops[-1] == (model.name, "sent"):
            ops[-1] = (model.name, code)

    events = dynamodb_client.meta.events
    events.register("provide-client-params.dynamodb.*", record)
    events.register("after-call.dynamodb.*", failed)
    yield ops
    events.unregister("provide-client-params.dynamodb.*", record)
    events.unregister("after-call.dynamodb.*", failed)


@pytest.fixture
def url(serve: Callable[..., str], letta_url: str, dynamodb_client: Any) -> str:
    return serve(make_gateway(letta_url, DynamoDBBackend(TABLE, client=dynamodb_client)))


def paused(client: openai.OpenAI) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "CALL:read_file {}"}]
    first = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    return [
        *messages,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "R"},
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_a_resume_is_one_conditional_write_and_a_retry_is_answered_from_letta(
    url: str, letta: LettaDouble, thread_ops: list[tuple[str, str]], dynamodb_client: Any, stream: bool
) -> None:
    agent = letta.add_agent("coder")

    def send(client: openai.OpenAI, messages: list[dict[str, Any]]) -> str:
        if not stream:
            return (
                client.chat.completions.create(model="coder", messages=messages, tools=TOOLS).choices[0].message.content
                or ""
            )
        chunks = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    with openai.OpenAI(base_url=f"{url}/v1", api_key=ALICE, max_retries=0) as client:
        messages = paused(client)
        assert thread_ops == [("PutItem", "sent")]

        thread_ops.clear()
        answer = send(client, messages)
        assert answer.endswith("=R")
        assert thread_ops == [("UpdateItem", "sent")]  # the claim, nothing after it

        thread_ops.clear()
        reads = letta.run_reads
        assert send(client, messages) == answer  # a retry: Letta's run found and replayed, nothing sent
        assert thread_ops == [("UpdateItem", "ConditionalCheckFailedException"), ("UpdateItem", "sent")]
        assert letta.run_reads > reads

        thread_ops.clear()
        reads = letta.run_reads
        assert send(client, messages) == answer  # the first retry marked it done: no search this time
        assert thread_ops == [("UpdateItem", "ConditionalCheckFailedException")]
        assert letta.run_reads == reads + 2  # the run and its messages

    assert len(letta.approvals_received(agent.id)) == 1
    record = DynamoDBBackend(TABLE, client=dynamodb_client).get(thread_key(agent.id, None))
    assert record is not None and record.status == "done" and record.resume_run_id


def test_a_retry_while_the_first_submission_is_still_running_is_409(
    url: str, letta: LettaDouble, thread_ops: list[tuple[str, str]]
) -> None:
    agent = letta.add_agent("coder")
    with openai.OpenAI(base_url=f"{url}/v1", api_key=ALICE, max_retries=0) as client:
        messages = paused(client)
        letta.delay = 1.0  # the first submission waits in Letta
        results: list[str] = []
        first = threading.Thread(
            target=lambda: results.append(
                client.chat.completions.create(model="coder", messages=messages, tools=TOOLS).choices[0].message.content
                or ""
            )
        )
        first.start()
        deadline = time.monotonic() + 5
        while not letta.approvals_received(agent.id) and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(openai.ConflictError) as info:
            client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
        first.join(10)
    assert info.value.body["code"] == "resume_in_progress"
    assert info.value.response.headers["retry-after"] == "2"
    assert results and results[0].endswith("=R")
    assert len(letta.approvals_received(agent.id)) == 1

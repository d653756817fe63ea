"""Clients that need a tool call in every turn (Roo Code): a text-only answer arrives as a call to the request's
completion tool, and that call's 'result' (the user's feedback) reaches the agent as a user message."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import openai
import pytest

from letta_gateway.translate import SYNTHETIC_PREFIX, completion_tool_call
from tests.conftest import ALICE, make_gateway
from tests.support.letta_double import LettaDouble

ROO_TOOLS = json.loads((Path(__file__).resolve().parents[1] / "clients" / "data" / "roo-code-tools.json").read_text())


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        ({"type": "object", "properties": {"result": {"type": "string"}}, "required": ["result"]}, {"result": "t"}),
        (
            {
                "type": "object",
                "properties": {"summary": {"type": "string"}, "n": {"type": "integer"}},
                "required": ["n", "summary"],
            },
            {"summary": "t"},
        ),
        ({"type": "object", "properties": {}}, {"result": "t"}),
    ],
)
def test_the_argument_follows_the_tools_schema(parameters: dict[str, Any], expected: dict[str, str]) -> None:
    call = completion_tool_call({"name": "attempt_completion", "parameters": parameters}, "t")
    assert call.id.startswith(SYNTHETIC_PREFIX) and json.loads(call.function.arguments) == expected


def roo(client: openai.OpenAI, messages: list[dict[str, Any]], stream: bool = False) -> Any:
    return client.chat.completions.create(
        model="coder",
        messages=messages,
        tools=ROO_TOOLS,
        tool_choice="auto",
        parallel_tool_calls=True,
        stream=stream,
        **({"stream_options": {"include_usage": True}} if stream else {}),
    )


def test_text_only_turn_becomes_attempt_completion(client: openai.OpenAI, letta: LettaDouble) -> None:
    agent = letta.add_agent("coder")
    messages = [{"role": "system", "content": "You are Roo."}, {"role": "user", "content": "SAY:All done here."}]
    first = roo(client, messages)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.function.name == "attempt_completion" and json.loads(call.function.arguments) == {
        "result": "All done here."
    }
    # Roo sends the user's feedback as that call's result, plus its environment details.
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "<feedback>SAY:thanks noted</feedback>"},
        {"role": "user", "content": "<environment_details>x</environment_details>"},
    ]
    second = roo(client, messages)
    assert json.loads(second.choices[0].message.tool_calls[0].function.arguments)["result"].startswith("thanks noted")
    sent = letta.message_posts(agent.id)[-1]["messages"]
    assert [m.get("role") or m.get("type") for m in sent] == ["user", "user"]  # no approval Letta never asked for
    assert sent[0]["content"] == "<feedback>SAY:thanks noted</feedback>"


def test_streamed_text_only_turn_ends_with_the_completion_call(client: openai.OpenAI, letta: LettaDouble) -> None:
    letta.add_agent("coder")
    content, calls, finish, usage = "", {}, None, None
    for chunk in roo(client, [{"role": "user", "content": "SAY:Streamed and done."}], stream=True):
        usage = chunk.usage or usage
        for choice in chunk.choices:
            assert choice.delta.content is not None  # every delta carries content
            content += choice.delta.content
            for tc in choice.delta.tool_calls or ():
                calls.setdefault(tc.index, {"id": tc.id, "name": tc.function.name, "arguments": ""})
                calls[tc.index]["arguments"] += tc.function.arguments or ""
            finish = choice.finish_reason or finish
    assert content == "Streamed and done." and finish == "tool_calls" and usage is not None
    assert calls[0]["name"] == "attempt_completion" and json.loads(calls[0]["arguments"]) == {
        "result": "Streamed and done."
    }


def test_real_tool_calls_are_untouched(client: openai.OpenAI, letta: LettaDouble) -> None:
    letta.add_agent("coder")
    reply = roo(client, [{"role": "user", "content": 'CALL:list_files {"path": ".", "recursive": false}'}])
    assert [c.function.name for c in reply.choices[0].message.tool_calls] == ["list_files"]
    assert not reply.choices[0].message.tool_calls[0].id.startswith(SYNTHETIC_PREFIX)


def test_without_the_completion_tool_or_switched_off_text_stays_text(
    client: openai.OpenAI, serve: Callable[..., str], letta_url: str, backend_factory, letta: LettaDouble
) -> None:
    letta.add_agent("coder")
    others = [t for t in ROO_TOOLS if t["function"]["name"] != "attempt_completion"]
    reply = client.chat.completions.create(
        model="coder", tools=others, messages=[{"role": "user", "content": "SAY:plain"}]
    )
    assert reply.choices[0].message.content == "plain" and reply.choices[0].finish_reason == "stop"
    gateway = make_gateway(letta_url, backend_factory())
    gateway.options = replace(gateway.options, completion_tool=None)
    with openai.OpenAI(base_url=f"{serve(gateway)}/v1", api_key=ALICE, max_retries=0) as off:
        reply = roo(off, [{"role": "user", "content": "SAY:plain too"}])
    assert reply.choices[0].message.content == "plain too" and reply.choices[0].finish_reason == "stop"

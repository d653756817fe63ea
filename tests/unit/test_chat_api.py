"""The gateway served by uvicorn, driven by the official openai SDK, in front of the Letta double."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx
import openai
import pytest

from letta_gateway.translate import otid
from tests.conftest import ALICE, BOB, HTTP_CLIENTS, make_gateway
from tests.support.letta_double import LettaDouble

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_files",
            "description": "List files",
            "parameters": {"type": "object", "properties": {"dir": {"type": "string"}}},
        },
    },
]
LETTA_TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
            "additionalProperties": False,
        },
    },
    {
        "name": "list_files",
        "description": "List files",
        "parameters": {"type": "object", "properties": {"dir": {"type": "string"}}},
    },
]
SYSTEM = {"role": "system", "content": "You are a coding assistant."}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant_of(message: Any) -> dict[str, Any]:
    return message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"})


def tool(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def collect(stream: Any) -> tuple[str, str, list[dict[str, Any]], str | None, Any, list[Any]]:
    """Reassemble a streamed answer the way OpenAI clients do: content, reasoning, tool calls by index."""
    content, reasoning, calls, finish, usage, chunks = "", "", {}, None, None, []
    for chunk in stream:
        chunks.append(chunk)
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            reasoning += getattr(delta, "reasoning_content", None) or ""
            for tc in delta.tool_calls or ():
                entry = calls.setdefault(
                    tc.index, {"id": None, "type": "function", "function": {"name": None, "arguments": ""}}
                )
                entry["id"] = tc.id or entry["id"]
                if tc.function is not None:
                    entry["function"]["name"] = tc.function.name or entry["function"]["name"]
                    entry["function"]["arguments"] += tc.function.arguments or ""
            finish = choice.finish_reason or finish
    return content, reasoning, [calls[i] for i in sorted(calls)], finish, usage, chunks


@pytest.fixture
def coder(letta: LettaDouble):
    return letta.add_agent("coder")


# ------------------------------------------------------------------------------------------------- models


def test_models_list_names_unique_agents_and_ids_for_duplicates(client: openai.OpenAI, letta: LettaDouble) -> None:
    coder = letta.add_agent("coder")
    twins = [letta.add_agent("twin"), letta.add_agent("twin")]
    models = client.models.list()
    assert sorted(m.id for m in models.data) == sorted(["coder", twins[0].id, twins[1].id])
    assert {m.owned_by for m in models.data} == {"letta"}
    assert client.models.retrieve("coder").id == "coder"
    assert client.models.retrieve(coder.id).id == "coder"
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("nobody")
    assert info.value.body["code"] == "model_not_found"


def test_model_resolution_is_cached(client: openai.OpenAI, letta: LettaDouble, coder) -> None:
    for _ in range(3):
        client.chat.completions.create(model="coder", messages=[user("hi")])
    assert letta.list_calls == 1


def test_unknown_model_is_404(client: openai.OpenAI, letta: LettaDouble) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="ghost", messages=[user("hi")])
    assert info.value.body == {
        "message": info.value.body["message"],
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }


def test_ambiguous_agent_name_is_400(client: openai.OpenAI, letta: LettaDouble) -> None:
    letta.add_agent("twin"), letta.add_agent("twin")
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="twin", messages=[user("hi")])
    assert info.value.body["code"] == "model_ambiguous"


# -------------------------------------------------------------------------------------------- plain turns


def test_text_turn_sends_only_the_new_message(client: openai.OpenAI, letta: LettaDouble, coder) -> None:
    history = [SYSTEM, user("first"), {"role": "assistant", "content": "earlier answer"}]
    result = client.chat.completions.create(
        model="coder", messages=[*history, user("SAY:Hello there friend")], temperature=0.3, max_tokens=50
    )
    assert result.choices[0].message.content == "Hello there friend"
    assert result.choices[0].finish_reason == "stop"
    assert result.model == "coder" and result.id.startswith("chatcmpl-")
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.total_tokens) == (10, 5, 15)
    assert letta.message_posts(coder.id) == [{"messages": [user("SAY:Hello there friend")], "streaming": False}]


def test_chat_by_agent_id(client: openai.OpenAI, letta: LettaDouble, coder) -> None:
    result = client.chat.completions.create(model=coder.id, messages=[user("SAY:by id")])
    assert result.choices[0].message.content == "by id" and result.model == coder.id


def test_streamed_text_turn_with_usage(client: openai.OpenAI, coder) -> None:
    stream = client.chat.completions.create(
        model="coder", messages=[user("SAY:one two three four")], stream=True, stream_options={"include_usage": True}
    )
    content, _, calls, finish, usage, chunks = collect(stream)
    assert content == "one two three four" and finish == "stop" and calls == []
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 4  # token by token
    assert chunks[-1].choices == [] and usage.total_tokens == 15


def test_stream_wire_format(gateway_url: str, coder) -> None:
    """Raw SSE: data lines, every delta has content, keepalive comment for Letta pings, [DONE] last."""
    body = {"model": "coder", "messages": [user("SAY:hi you")], "stream": True}
    with httpx.stream(
        "POST", f"{gateway_url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {ALICE}"}
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    assert ": keepalive" in lines
    payloads = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    assert all("content" in p["choices"][0]["delta"] for p in payloads)
    assert [p["choices"][0]["finish_reason"] for p in payloads][-1] == "stop"
    assert len({p["id"] for p in payloads}) == 1


def test_reasoning_is_reasoning_content(client: openai.OpenAI, coder) -> None:
    result = client.chat.completions.create(model="coder", messages=[user("THINK:let me see SAY:ok")])
    message = result.choices[0].message
    assert message.content == "ok" and message.model_extra["reasoning_content"] == "let me see"
    _, reasoning, *_ = collect(
        client.chat.completions.create(model="coder", messages=[user("THINK:streamed thought SAY:ok")], stream=True)
    )
    assert reasoning == "streamed thought"


def test_images_become_letta_image_content(client: openai.OpenAI, letta: LettaDouble, coder) -> None:
    client.chat.completions.create(
        model="coder",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                ],
            }
        ],
    )
    assert letta.message_posts(coder.id)[0]["messages"][0]["content"] == [
        {"type": "text", "text": "what is this"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
    ]


def test_server_side_tool_activity_is_not_a_tool_call(client: openai.OpenAI, coder) -> None:
    """The agent calls a tool that is not a client tool: Letta runs (and here rejects) it server-side."""
    result = client.chat.completions.create(model="coder", messages=[user('CALL:memory_insert {"x": 1}')], tools=TOOLS)
    assert result.choices[0].finish_reason == "stop" and result.choices[0].message.tool_calls is None


def test_tool_choice_none_sends_no_client_tools(client: openai.OpenAI, letta: LettaDouble, coder) -> None:
    client.chat.completions.create(model="coder", messages=[user("hi")], tools=TOOLS, tool_choice="none")
    assert "client_tools" not in letta.message_posts(coder.id)[0]


# -------------------------------------------------------------------------------------------- tool rounds


def test_tool_round_trip(client: openai.OpenAI, letta: LettaDouble, coder) -> None:
    messages = [SYSTEM, user('Reading. SAY:x CALL:read_file {"path": "src/app.py"}')]
    first = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert (call.type, call.function.name, json.loads(call.function.arguments)) == (
        "function",
        "read_file",
        {"path": "src/app.py"},
    )
    messages += [assistant_of(choice.message), tool(call.id, "print('hello')")]
    second = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == f"Done. Tool results: {call.id}=print('hello')"
    assert letta.message_posts(coder.id)[1] == {
        "messages": [
            {
                "type": "approval",
                "approvals": [
                    {"type": "tool", "tool_call_id": call.id, "tool_return": "print('hello')", "status": "success"}
                ],
                "otid": otid(f"resume:{coder.id}:{call.id}", 0),  # the same results always get the same otid
            }
        ],
        "client_tools": LETTA_TOOLS,
        "streaming": False,
    }


def test_streamed_tool_round_trip(client: openai.OpenAI, letta: LettaDouble, coder) -> None:
    messages = [user('CALL:read_file {"path": "a.py"}')]
    _, _, calls, finish, _, chunks = collect(
        client.chat.completions.create(model="coder", messages=messages, tools=TOOLS, stream=True)
    )
    assert finish == "tool_calls" and len(calls) == 1
    assert calls[0]["function"] == {"name": "read_file", "arguments": '{"path": "a.py"}'}
    first_tool_delta = next(c for c in chunks if c.choices and c.choices[0].delta.tool_calls)
    assert first_tool_delta.choices[0].delta.tool_calls[0].id == calls[0]["id"]
    messages += [{"role": "assistant", "content": None, "tool_calls": calls}, tool(calls[0]["id"], "A-BODY")]
    content, _, calls2, finish2, _, _ = collect(
        client.chat.completions.create(model="coder", messages=messages, tools=TOOLS, stream=True)
    )
    assert finish2 == "stop" and calls2 == [] and "A-BODY" in content
    assert len(letta.approvals_received(coder.id)) == 1


def test_parallel_tool_calls_answered_together(client: openai.OpenAI, letta: LettaDouble) -> None:
    letta.add_agent("multi", parallel=True)
    messages = [user('CALL:read_file {"path": "c.py"} CALL:list_files {"dir": "lib"}')]
    _, _, calls, finish, _, _ = collect(
        client.chat.completions.create(model="multi", messages=messages, tools=TOOLS, stream=True)
    )
    assert finish == "tool_calls"
    assert [c["function"]["name"] for c in calls] == ["read_file", "list_files"]
    messages += [{"role": "assistant", "tool_calls": calls}, tool(calls[1]["id"], "LIB"), tool(calls[0]["id"], "C")]
    result = client.chat.completions.create(model="multi", messages=messages, tools=TOOLS)
    assert result.choices[0].message.content == f"Done. Tool results: {calls[0]['id']}=C; {calls[1]['id']}=LIB"


def test_partial_answer_lists_the_missing_call(client: openai.OpenAI, letta: LettaDouble) -> None:
    agent = letta.add_agent("multi", parallel=True)
    messages = [user('CALL:read_file {"path": "c.py"} CALL:list_files {"dir": "lib"}')]
    first = client.chat.completions.create(model="multi", messages=messages, tools=TOOLS)
    calls = first.choices[0].message.tool_calls
    messages += [assistant_of(first.choices[0].message), tool(calls[0].id, "C")]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="multi", messages=messages, tools=TOOLS)
    assert info.value.body["code"] == "tool_results_mismatch" and calls[1].id in info.value.body["message"]
    assert letta.approvals_received(agent.id) == []
    messages.append(tool(calls[1].id, "LIB"))  # the complete answer still works afterwards
    assert (
        client.chat.completions.create(model="multi", messages=messages, tools=TOOLS).choices[0].finish_reason == "stop"
    )


def test_two_rounds_then_tool_results_with_a_user_message(client: openai.OpenAI, letta: LettaDouble, coder) -> None:
    messages = [user('CALL:read_file {"path": "a"} THEN:CALL:list_files {"dir": "b"}')]
    first = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    [call1] = first.choices[0].message.tool_calls
    messages += [assistant_of(first.choices[0].message), tool(call1.id, "A")]
    second = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    assert second.choices[0].finish_reason == "tool_calls"
    [call2] = second.choices[0].message.tool_calls
    assert call2.function.name == "list_files" and call2.id != call1.id
    messages += [assistant_of(second.choices[0].message), tool(call2.id, "B"), user("and summarise")]
    third = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    assert third.choices[0].message.content == f"Done. Tool results: {call2.id}=B And you said: and summarise"
    last = letta.message_posts(coder.id)[-1]["messages"]
    assert [m.get("type") or m.get("role") for m in last] == ["approval", "user"]


def test_resume_on_a_fresh_gateway_instance(
    serve: Callable[..., str], letta_url: str, backend_factory: Callable[[], Any], letta: LettaDouble, coder
) -> None:
    """Pause served by one gateway, resume by another that shares only the state store."""
    first_url = serve(make_gateway(letta_url, backend_factory()))
    second_url = serve(make_gateway(letta_url, backend_factory()))
    messages = [user('CALL:read_file {"path": "x"}')]
    with openai.OpenAI(base_url=f"{first_url}/v1", api_key=ALICE, max_retries=0) as one:
        first = one.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    messages += [assistant_of(first.choices[0].message), tool(call.id, "X-BODY")]
    with openai.OpenAI(base_url=f"{second_url}/v1", api_key=ALICE, max_retries=0) as two:
        second = two.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    assert "X-BODY" in second.choices[0].message.content


def test_another_key_cannot_resume_or_probe(gateway_url: str, client: openai.OpenAI, letta: LettaDouble, coder) -> None:
    messages = [user('CALL:read_file {"path": "secret"}')]
    first = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    messages += [assistant_of(first.choices[0].message), tool(call.id, "stolen")]
    with openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=BOB, max_retries=0) as bob:
        with pytest.raises(openai.NotFoundError) as info:
            bob.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    assert info.value.body["code"] == "tool_calls_not_found"
    assert letta.approvals_received(coder.id) == []
    assert "stolen" not in json.dumps([r["body"] for r in letta.requests])


def test_a_retried_submission_gets_the_same_answer_without_reaching_letta(
    client: openai.OpenAI, letta: LettaDouble, coder
) -> None:
    messages = [user('CALL:read_file {"path": "a"}')]
    first = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    messages += [assistant_of(first.choices[0].message), tool(call.id, "A")]
    answer = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    posts = len(letta.requests)
    again = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    assert again.choices[0].message.content == answer.choices[0].message.content == f"Done. Tool results: {call.id}=A"
    assert again.choices[0].finish_reason == "stop"
    _, _, _, finish, _, streamed = collect(
        client.chat.completions.create(model="coder", messages=messages, tools=TOOLS, stream=True)
    )
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == answer.choices[0].message.content
    assert finish == "stop"
    assert len(letta.requests) == posts and letta.run_reads >= 2  # read back from Letta's run, nothing sent
    assert len(letta.approvals_received(coder.id)) == 1 and letta.keepalive_pings == 0


def test_a_retried_submission_that_paused_again_replays_the_new_tool_calls(
    client: openai.OpenAI, letta: LettaDouble, coder
) -> None:
    messages = [user('CALL:read_file {"path": "a"} THEN:CALL:list_files {"dir": "b"}')]
    first = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    messages += [assistant_of(first.choices[0].message), tool(call.id, "A")]
    second = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    retry = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    assert retry.choices[0].finish_reason == "tool_calls"
    assert retry.choices[0].message.tool_calls == second.choices[0].message.tool_calls
    assert len(letta.approvals_received(coder.id)) == 1
    # the new round still resumes normally
    messages += [assistant_of(second.choices[0].message), tool(second.choices[0].message.tool_calls[0].id, "B")]
    third = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    assert third.choices[0].message.content.endswith("=B")


def test_concurrent_duplicates_reach_letta_once(gateway_url: str, letta: LettaDouble, coder) -> None:
    with openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=ALICE, max_retries=0) as c:
        messages = [user('CALL:read_file {"path": "a"}')]
        first = c.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    messages += [assistant_of(first.choices[0].message), tool(call.id, "A")]
    letta.delay = 0.2

    async def submit(c: openai.AsyncOpenAI) -> str:
        try:
            await c.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
            return "ok"
        except openai.ConflictError as error:
            return error.body["code"]

    async def main() -> list[str]:
        async with openai.AsyncOpenAI(base_url=f"{gateway_url}/v1", api_key=ALICE, max_retries=0) as c:
            return await asyncio.gather(*(submit(c) for _ in range(6)))

    outcomes = asyncio.run(main())
    assert "ok" in outcomes and set(outcomes) <= {"ok", "resume_in_progress"}
    assert len(letta.approvals_received(coder.id)) == 1


def test_a_new_message_instead_of_tool_results_denies_them_and_continues(
    client: openai.OpenAI, letta: LettaDouble, coder
) -> None:
    first = client.chat.completions.create(model="coder", messages=[user('CALL:read_file {"path": "a"}')], tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    reply = client.chat.completions.create(model="coder", messages=[user("never mind, hello")], tools=TOOLS)
    assert reply.choices[0].finish_reason == "stop" and "never mind, hello" in reply.choices[0].message.content
    denial, message = letta.message_posts(coder.id)[-1]["messages"]
    assert denial["type"] == "approval" and message == user("never mind, hello")
    assert [(a["tool_call_id"], a["approve"]) for a in denial["approvals"]] == [(call.id, False)]
    assert "did not run this tool" in denial["approvals"][0]["reason"]
    assert letta.agents[coder.id].pending is None
    # the denied calls are gone: their late results are not sent
    late = [user("x"), assistant_of(first.choices[0].message), tool(call.id, "late")]
    with pytest.raises(openai.ConflictError) as info:
        client.chat.completions.create(model="coder", messages=late, tools=TOOLS)
    assert info.value.body["code"] == "tool_results_already_submitted"
    assert "late" not in json.dumps([r["body"] for r in letta.requests])


def test_another_keys_pending_tool_calls_are_not_denied(gateway_url: str, letta: LettaDouble, coder) -> None:
    with openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=BOB, max_retries=0) as bob:
        bob.chat.completions.create(model="coder", messages=[user('CALL:read_file {"path": "a"}')], tools=TOOLS)
    with openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=ALICE, max_retries=0) as alice:
        with pytest.raises(openai.ConflictError) as info:
            alice.chat.completions.create(model="coder", messages=[user("hello")], tools=TOOLS)
    assert info.value.body["code"] == "agent_pending_approval"
    assert "GATEWAY_DENY_UNKNOWN_APPROVALS" in info.value.body["message"]
    assert letta.agents[coder.id].pending is not None and letta.approvals_received(coder.id) == []


def test_unknown_approvals_are_denied_when_switched_on(
    serve: Callable[..., str], letta_url: str, backend_factory, letta: LettaDouble, coder
) -> None:
    other = serve(make_gateway(letta_url, backend_factory()))
    with openai.OpenAI(base_url=f"{other}/v1", api_key=BOB, max_retries=0) as bob:
        paused = bob.chat.completions.create(model="coder", messages=[user('CALL:read_file {"p": 1}')], tools=TOOLS)
    gateway = make_gateway(letta_url, backend_factory())
    gateway.options = replace(gateway.options, deny_unknown_approvals=True)
    url = serve(gateway)
    with openai.OpenAI(base_url=f"{url}/v1", api_key=ALICE, max_retries=0) as alice:
        reply = alice.chat.completions.create(model="coder", messages=[user("SAY:moving on")], tools=TOOLS)
    assert reply.choices[0].message.content == "moving on"
    denial = letta.message_posts(coder.id)[-1]["messages"][0]
    assert [a["tool_call_id"] for a in denial["approvals"]] == [paused.choices[0].message.tool_calls[0].id]


def test_unknown_tool_call_id_is_404(client: openai.OpenAI, letta: LettaDouble, coder) -> None:
    fake = {"id": "call_never_made", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(
            model="coder",
            tools=TOOLS,
            messages=[user("x"), {"role": "assistant", "tool_calls": [fake]}, tool("call_never_made", "r")],
        )
    assert info.value.body["code"] == "tool_calls_not_found"
    assert letta.message_posts(coder.id) == []


# ------------------------------------------------------------------------------------------- Letta faults


@pytest.mark.parametrize(
    ("status", "body", "headers", "error", "code", "retry_after"),
    [
        (500, {"detail": "boom"}, {}, openai.InternalServerError, "upstream_error", None),
        (503, {"detail": "down"}, {}, openai.InternalServerError, "upstream_error", None),
        (429, {"detail": "slow down"}, {"Retry-After": "7"}, openai.RateLimitError, "rate_limit_exceeded", "7"),
        (
            409,
            {"detail": {"code": "CONVERSATION_BUSY", "message": "busy"}},
            {},
            openai.ConflictError,
            "agent_busy",
            "2",
        ),
        (422, {"detail": [{"msg": "bad field"}]}, {}, openai.BadRequestError, "letta_rejected", None),
        (401, {"detail": "bad key"}, {}, openai.InternalServerError, "upstream_auth", None),
    ],
)
def test_letta_errors_map_to_openai_errors(
    gateway_url: str,
    letta: LettaDouble,
    coder,
    status: int,
    body: Any,
    headers: dict[str, str],
    error: type[Exception],
    code: str,
    retry_after: str | None,
) -> None:
    letta.fail_next(status, body, headers)
    with openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=ALICE, max_retries=0) as c:
        with pytest.raises(error) as info:
            c.chat.completions.create(model="coder", messages=[user("hi")])
    assert info.value.body["code"] == code
    assert info.value.response.headers.get("retry-after") == retry_after
    assert "Traceback" not in info.value.response.text


def test_failed_resume_leaves_the_tool_calls_consumable(client: openai.OpenAI, letta: LettaDouble, coder) -> None:
    messages = [user('CALL:read_file {"path": "a"}')]
    first = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    messages += [assistant_of(first.choices[0].message), tool(call.id, "A")]
    letta.fail_next(502, {"detail": "bad gateway"})
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    result = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    assert "A" in result.choices[0].message.content


@pytest.mark.parametrize("http_client", HTTP_CLIENTS)
def test_letta_timeout_is_504(
    serve: Callable[..., str], letta_url: str, backend_factory, letta: LettaDouble, coder, http_client: str
) -> None:
    url = serve(make_gateway(letta_url, backend_factory(), timeout=0.3, http_client=http_client))
    letta.delay = 1.0
    with openai.OpenAI(base_url=f"{url}/v1", api_key=ALICE, max_retries=0) as c:
        with pytest.raises(openai.APIStatusError) as info:
            c.chat.completions.create(model="coder", messages=[user("hi")])
    assert info.value.status_code == 504 and info.value.body["code"] == "upstream_timeout"


@pytest.mark.parametrize("http_client", HTTP_CLIENTS)
def test_letta_unreachable_is_502(serve: Callable[..., str], backend_factory, http_client: str) -> None:
    url = serve(make_gateway("http://127.0.0.1:9", backend_factory(), http_client=http_client))
    with openai.OpenAI(base_url=f"{url}/v1", api_key=ALICE, max_retries=0) as c:
        with pytest.raises(openai.InternalServerError) as info:
            c.models.list()
    assert info.value.status_code == 502 and info.value.body["code"] == "upstream_unavailable"


def test_stream_errors_before_the_first_byte_get_a_status(client: openai.OpenAI, letta: LettaDouble, coder) -> None:
    letta.fail_next(500, {"detail": "boom"})
    with pytest.raises(openai.InternalServerError):
        collect(client.chat.completions.create(model="coder", messages=[user("hi")], stream=True))


def test_concurrent_first_requests_share_one_agent_lookup(gateway_url: str, letta: LettaDouble) -> None:
    letta.add_agent("coder")

    async def main() -> list[str]:
        async with openai.AsyncOpenAI(base_url=f"{gateway_url}/v1", api_key=ALICE, max_retries=0) as c:
            replies = await asyncio.gather(
                *(c.chat.completions.create(model="coder", messages=[user("SAY:hi")]) for _ in range(16))
            )
            return [r.choices[0].message.content for r in replies]

    assert asyncio.run(main()) == ["hi"] * 16
    assert letta.list_calls == 1  # not one lookup per waiting request

"""End to end: openai SDK -> gateway (uvicorn, separate processes) -> real Letta 0.16.8 -> scripted model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import openai
import pytest

from tests.e2e.conftest import KEY, OTHER_KEY, GatewayProcess, letta_dev

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the user's workspace",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_files",
            "description": "List a directory of the workspace",
            "parameters": {"type": "object", "properties": {"dir": {"type": "string"}}, "required": ["dir"]},
        },
    },
]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def tool(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def assistant_of(message: Any) -> dict[str, Any]:
    return message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"})


def collect(stream: Any) -> tuple[str, str, list[dict[str, Any]], str | None, Any, int]:
    content, reasoning, calls, finish, usage, n = "", "", {}, None, None, 0
    for chunk in stream:
        n += 1
        usage = chunk.usage or usage
        for choice in chunk.choices:
            content += choice.delta.content or ""
            reasoning += getattr(choice.delta, "reasoning_content", None) or ""
            for tc in choice.delta.tool_calls or ():
                entry = calls.setdefault(
                    tc.index, {"id": None, "type": "function", "function": {"name": None, "arguments": ""}}
                )
                entry["id"] = tc.id or entry["id"]
                if tc.function:
                    entry["function"]["name"] = tc.function.name or entry["function"]["name"]
                    entry["function"]["arguments"] += tc.function.arguments or ""
            finish = choice.finish_reason or finish
    return content, reasoning, [calls[i] for i in sorted(calls)], finish, usage, n


def test_models_list_and_chat_by_name_and_id(client: openai.OpenAI, make_agent: Callable[..., dict]) -> None:
    agent = make_agent()
    ids = [m.id for m in client.models.list().data]
    assert agent["name"] in ids
    by_name = client.chat.completions.create(model=agent["name"], messages=[user("SAY:hello by name")])
    by_id = client.chat.completions.create(model=agent["id"], messages=[user("SAY:hello by id")])
    assert by_name.choices[0].message.content == "hello by name"
    assert by_id.choices[0].message.content == "hello by id"
    assert by_name.choices[0].finish_reason == by_id.choices[0].finish_reason == "stop"
    assert by_name.usage.total_tokens > 0


def test_streamed_text_turn_with_usage(client: openai.OpenAI, make_agent: Callable[..., dict]) -> None:
    agent = make_agent()
    stream = client.chat.completions.create(
        model=agent["name"],
        messages=[user("SAY:one two three four five")],
        stream=True,
        stream_options={"include_usage": True},
    )
    content, _, calls, finish, usage, chunks = collect(stream)
    assert content == "one two three four five" and finish == "stop" and calls == []
    assert usage is not None and usage.total_tokens > 0
    assert chunks >= 5 + 3  # token by token, plus the opening, closing and usage chunks


def test_reasoning(client: openai.OpenAI, make_agent: Callable[..., dict]) -> None:
    agent = make_agent()
    reply = client.chat.completions.create(model=agent["name"], messages=[user("THINK:weighing options SAY:done")])
    assert reply.choices[0].message.content == "done"
    assert "weighing options" in reply.choices[0].message.model_extra["reasoning_content"]


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
@pytest.mark.parametrize("stream", [False, True])
def test_tool_round_trip(
    gateways: tuple[GatewayProcess, GatewayProcess], make_agent: Callable[..., dict], stream: bool, transport: str
) -> None:
    gateway = next(g for g in gateways if g.transport == transport)
    with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0, timeout=120) as client:
        round_trip(client, make_agent(), stream)


def round_trip(client: openai.OpenAI, agent: dict, stream: bool) -> None:
    messages = [{"role": "system", "content": "ignored"}, user('CALL:read_file {"path": "src/app.py"}')]
    if stream:
        _, _, calls, finish, _, _ = collect(
            client.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS, stream=True)
        )
        assistant = {"role": "assistant", "content": None, "tool_calls": calls}
    else:
        first = client.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
        finish = first.choices[0].finish_reason
        assistant = assistant_of(first.choices[0].message)
        calls = assistant["tool_calls"]
    assert finish == "tool_calls" and len(calls) == 1
    assert calls[0]["function"]["name"] == "read_file"
    assert json.loads(calls[0]["function"]["arguments"]) == {"path": "src/app.py"}
    messages += [assistant, tool(calls[0]["id"], "print('hello from app.py')")]
    if stream:
        content, _, more, finish2, _, _ = collect(
            client.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS, stream=True)
        )
    else:
        final = client.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
        content, more, finish2 = (
            final.choices[0].message.content,
            final.choices[0].message.tool_calls,
            final.choices[0].finish_reason,
        )
    assert finish2 == "stop" and not more
    assert "hello from app.py" in content  # the tool's output reached the agent's model


def test_two_parallel_tool_calls_answered_together(client: openai.OpenAI, make_agent: Callable[..., dict]) -> None:
    agent = make_agent(parallel=True)
    messages = [user('CALL:read_file {"path": "c.py"} CALL:list_files {"dir": "lib"}')]
    first = client.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
    calls = first.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["read_file", "list_files"]
    messages += [assistant_of(first.choices[0].message), tool(calls[0].id, "C-BODY"), tool(calls[1].id, "LIB-LIST")]
    final = client.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
    assert "C-BODY" in final.choices[0].message.content and "LIB-LIST" in final.choices[0].message.content


def test_two_rounds_then_results_with_a_user_message(
    client: openai.OpenAI, make_agent: Callable[..., dict], stack: dict[str, Any]
) -> None:
    agent = make_agent()
    messages = [user('CALL:read_file {"path": "a"} THEN:CALL:list_files {"dir": "b"}')]
    first = client.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
    [call1] = first.choices[0].message.tool_calls
    messages += [assistant_of(first.choices[0].message), tool(call1.id, "ROUND-ONE")]
    second = client.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
    assert second.choices[0].finish_reason == "tool_calls"
    [call2] = second.choices[0].message.tool_calls
    assert call2.function.name == "list_files"
    messages += [
        assistant_of(second.choices[0].message),
        tool(call2.id, "ROUND-TWO"),
        user("<environment_details>cwd=/work</environment_details>"),
    ]
    third = client.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
    assert third.choices[0].finish_reason == "stop" and third.choices[0].message.content
    # One Letta request carried both: the model saw the tool result, then the user message after it.
    seen = letta_dev.model_requests(stack)[-1]["messages"]
    roles = [(m["role"], json.dumps(m.get("content"))) for m in seen]
    tool_at = max(i for i, (role, content) in enumerate(roles) if role == "tool" and "ROUND-TWO" in content)
    assert any(role == "user" and "environment_details" in content for role, content in roles[tool_at + 1 :])


def test_resume_served_by_a_second_gateway_process(
    gateways: tuple[GatewayProcess, GatewayProcess], make_agent: Callable[..., dict]
) -> None:
    agent = make_agent()
    first_gw, second_gw = gateways
    messages = [user('CALL:read_file {"path": "x"}')]
    with openai.OpenAI(base_url=f"{first_gw.url}/v1", api_key=KEY, max_retries=0, timeout=120) as one:
        first = one.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    messages += [assistant_of(first.choices[0].message), tool(call.id, "FROM-SECOND-PROCESS")]
    with openai.OpenAI(base_url=f"{second_gw.url}/v1", api_key=KEY, max_retries=0, timeout=120) as two:
        final = two.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
    assert "FROM-SECOND-PROCESS" in final.choices[0].message.content


def test_duplicate_submission_does_not_reach_letta_again(
    gateways: tuple[GatewayProcess, GatewayProcess], make_agent: Callable[..., dict], model_calls: Callable[[], int]
) -> None:
    agent = make_agent()
    messages = [user('CALL:read_file {"path": "dup"}')]
    with openai.OpenAI(base_url=f"{gateways[0].url}/v1", api_key=KEY, max_retries=0, timeout=120) as c:
        first = c.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
        call = first.choices[0].message.tool_calls[0]
        messages += [assistant_of(first.choices[0].message), tool(call.id, "DUP-BODY")]
        answer = c.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
    before = model_calls()

    async def resubmit(url: str) -> str:
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=120) as ac:
            again = await ac.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
            return again.choices[0].message.content

    async def both() -> list[str]:
        return await asyncio.gather(resubmit(gateways[0].url), resubmit(gateways[1].url))

    replays = asyncio.run(both())
    assert replays == [answer.choices[0].message.content] * 2
    assert model_calls() == before  # the model server saw no new call: Letta was not asked again


def test_concurrent_first_submissions_reach_letta_once(
    gateways: tuple[GatewayProcess, GatewayProcess], make_agent: Callable[..., dict], model_calls: Callable[[], int]
) -> None:
    agent = make_agent()
    messages = [user('CALL:read_file {"path": "race"}')]
    with openai.OpenAI(base_url=f"{gateways[0].url}/v1", api_key=KEY, max_retries=0, timeout=120) as c:
        first = c.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    messages += [assistant_of(first.choices[0].message), tool(call.id, "RACE-BODY")]
    before = model_calls()

    async def submit(url: str) -> str:
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=120) as ac:
            try:
                reply = await ac.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
                return reply.choices[0].message.content
            except openai.ConflictError as error:
                return error.body["code"]

    async def race() -> list[str]:
        return await asyncio.gather(*(submit(gw.url) for gw in (*gateways, *gateways)))

    outcomes = asyncio.run(race())
    answers = [o for o in outcomes if o != "resume_in_progress"]
    assert answers and all("RACE-BODY" in a for a in answers)
    assert model_calls() - before == 1  # exactly one model call: one approval reached Letta


def test_new_message_while_tools_pending_denies_them(client: openai.OpenAI, make_agent: Callable[..., dict]) -> None:
    agent = make_agent()
    first = client.chat.completions.create(
        model=agent["name"], messages=[user('CALL:read_file {"path": "p"}')], tools=TOOLS
    )
    assert first.choices[0].finish_reason == "tool_calls"
    reply = client.chat.completions.create(model=agent["name"], messages=[user("SAY:changed my mind")], tools=TOOLS)
    assert reply.choices[0].finish_reason == "stop" and reply.choices[0].message.content
    after = client.chat.completions.create(model=agent["name"], messages=[user("SAY:still fine")], tools=TOOLS)
    assert after.choices[0].message.content == "still fine"  # the agent is not left blocked


def test_unknown_tool_call_id_is_a_400_listing_ids_and_agent_still_works(
    client: openai.OpenAI, make_agent: Callable[..., dict]
) -> None:
    agent = make_agent()
    first = client.chat.completions.create(
        model=agent["name"], messages=[user('CALL:read_file {"path": "u"}')], tools=TOOLS
    )
    real = first.choices[0].message.tool_calls[0]
    fake = {"id": "call_never_issued", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=agent["name"],
            tools=TOOLS,
            messages=[user("x"), {"role": "assistant", "tool_calls": [fake]}, tool("call_never_issued", "nope")],
        )
    assert "call_never_issued" in info.value.body["message"] and real.id in info.value.body["message"]
    final = client.chat.completions.create(
        model=agent["name"],
        tools=TOOLS,
        messages=[user("x"), assistant_of(first.choices[0].message), tool(real.id, "REAL-BODY")],
    )
    assert "REAL-BODY" in final.choices[0].message.content


def test_partial_answer_to_two_calls_is_400_and_the_full_answer_works(
    client: openai.OpenAI, make_agent: Callable[..., dict], model_calls: Callable[[], int]
) -> None:
    agent = make_agent(parallel=True)
    messages = [user('CALL:read_file {"path": "1"} CALL:list_files {"dir": "2"}')]
    first = client.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
    calls = first.choices[0].message.tool_calls
    messages.append(assistant_of(first.choices[0].message))
    before = model_calls()
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=agent["name"], messages=[*messages, tool(calls[0].id, "ONE")], tools=TOOLS)
    assert calls[1].id in info.value.body["message"]
    assert model_calls() == before
    final = client.chat.completions.create(
        model=agent["name"], messages=[*messages, tool(calls[0].id, "ONE"), tool(calls[1].id, "TWO")], tools=TOOLS
    )
    assert "ONE" in final.choices[0].message.content and "TWO" in final.choices[0].message.content


def test_another_key_cannot_resume(gateway_url: str, client: openai.OpenAI, make_agent: Callable[..., dict]) -> None:
    agent = make_agent()
    messages = [user('CALL:read_file {"path": "mine"}')]
    first = client.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
    messages += [assistant_of(first.choices[0].message), tool(first.choices[0].message.tool_calls[0].id, "THEIRS")]
    with openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=OTHER_KEY, max_retries=0) as other:
        with pytest.raises(openai.NotFoundError):
            other.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
    final = client.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
    assert "THEIRS" in final.choices[0].message.content


def test_async_sdk_streamed_round_trip(gateway_url: str, make_agent: Callable[..., dict]) -> None:
    agent = make_agent()

    async def run() -> str:
        async with openai.AsyncOpenAI(base_url=f"{gateway_url}/v1", api_key=KEY, max_retries=0, timeout=120) as ac:
            messages = [user('CALL:read_file {"path": "async"}')]
            stream = await ac.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS, stream=True)
            calls: dict[int, dict[str, Any]] = {}
            async for chunk in stream:
                for choice in chunk.choices:
                    for tc in choice.delta.tool_calls or ():
                        entry = calls.setdefault(
                            tc.index,
                            {"id": tc.id, "type": "function", "function": {"name": tc.function.name, "arguments": ""}},
                        )
                        entry["function"]["arguments"] += tc.function.arguments or ""
            messages += [{"role": "assistant", "tool_calls": list(calls.values())}, tool(calls[0]["id"], "ASYNC-BODY")]
            text = ""
            async for chunk in await ac.chat.completions.create(
                model=agent["name"], messages=messages, tools=TOOLS, stream=True
            ):
                text += "".join(c.delta.content or "" for c in chunk.choices)
            return text

    assert "ASYNC-BODY" in asyncio.run(run())


@pytest.mark.parametrize("letta_got_it", [False, True])
def test_retry_after_a_crashed_resume_asks_letta(
    client: openai.OpenAI,
    make_agent: Callable[..., dict],
    model_calls: Callable[[], int],
    state_path: Any,
    stack: dict[str, Any],
    letta_got_it: bool,
) -> None:
    """A gateway process claimed the tool results and died; the retry finds out from the real Letta what happened."""
    import time

    import httpx

    from letta_gateway.auth import key_id_of
    from letta_gateway.store import PendingApprovals
    from letta_gateway.store.sqlite import SQLiteBackend

    agent = make_agent()
    messages = [user('CALL:read_file {"path": "crash"}')]
    first = client.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    messages += [assistant_of(first.choices[0].message), tool(call.id, "SURVIVED-CRASH")]
    dead = PendingApprovals(SQLiteBackend(str(state_path)), clock=lambda: time.time() - 1200)
    dead.claim(owner=key_id_of(KEY), agent_id=agent["id"], conversation_id=None, tool_call_ids=[call.id])
    if letta_got_it:
        httpx.post(
            f"{stack['letta_base_url']}/v1/agents/{agent['id']}/messages",
            timeout=60,
            json={
                "messages": [
                    {
                        "type": "approval",
                        "approvals": [
                            {
                                "type": "tool",
                                "tool_call_id": call.id,
                                "tool_return": "SURVIVED-CRASH",
                                "status": "success",
                            }
                        ],
                    }
                ]
            },
        ).raise_for_status()
    before = model_calls()
    retry = client.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS)
    assert "SURVIVED-CRASH" in retry.choices[0].message.content
    assert model_calls() - before == (0 if letta_got_it else 1)


def test_idempotency_key_retry_does_not_reach_letta(
    client: openai.OpenAI, make_agent: Callable[..., dict], model_calls: Callable[[], int]
) -> None:
    agent = make_agent()
    headers = {"Idempotency-Key": "e2e-" + agent["id"]}
    first = client.chat.completions.create(
        model=agent["name"], messages=[user("SAY:exactly once")], extra_headers=headers
    )
    before = model_calls()
    again = client.chat.completions.create(
        model=agent["name"], messages=[user("SAY:exactly once")], extra_headers=headers
    )
    assert again.choices[0].message.content == first.choices[0].message.content == "exactly once"
    assert model_calls() == before


def test_roo_style_completion_tool_round_trip(client: openai.OpenAI, make_agent: Callable[..., dict]) -> None:
    """Roo needs a tool call every turn: the agent's text answer arrives as attempt_completion, and the user's
    feedback on it reaches the real agent as a user message."""
    agent = make_agent()
    tools = [
        *TOOLS,
        {
            "type": "function",
            "function": {
                "name": "attempt_completion",
                "description": "Present the result",
                "parameters": {"type": "object", "properties": {"result": {"type": "string"}}, "required": ["result"]},
            },
        },
    ]
    messages = [user("SAY:the task is finished")]
    first = client.chat.completions.create(model=agent["name"], messages=messages, tools=tools)
    [call] = first.choices[0].message.tool_calls
    assert call.function.name == "attempt_completion"
    assert json.loads(call.function.arguments) == {"result": "the task is finished"}
    messages += [assistant_of(first.choices[0].message), tool(call.id, "SAY:glad to help")]
    second = client.chat.completions.create(model=agent["name"], messages=messages, tools=tools)
    assert json.loads(second.choices[0].message.tool_calls[0].function.arguments) == {"result": "glad to help"}


def test_threads_are_letta_conversations(client: openai.OpenAI, make_agent: Callable[..., dict]) -> None:
    agent = make_agent()
    task = {"X-Letta-Chat-Key": "e2e-task-" + agent["id"]}
    other = {"X-Letta-Chat-Key": "e2e-other-" + agent["id"]}
    messages = [user('CALL:read_file {"path": "thread.py"}')]
    paused = client.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS, extra_headers=task)
    call = paused.choices[0].message.tool_calls[0]
    # the pause blocks neither another thread nor the agent's default thread
    meanwhile = client.chat.completions.create(
        model=agent["name"], messages=[user("SAY:other thread")], tools=TOOLS, extra_headers=other
    )
    default = client.chat.completions.create(model=agent["name"], messages=[user("SAY:default thread")], tools=TOOLS)
    assert meanwhile.choices[0].message.content == "other thread"
    assert default.choices[0].message.content == "default thread"
    messages += [assistant_of(paused.choices[0].message), tool(call.id, "THREAD-BODY")]
    _, _, _, finish, _, _ = collect(
        client.chat.completions.create(
            model=agent["name"], messages=messages, tools=TOOLS, stream=True, extra_headers=task
        )
    )
    final = client.chat.completions.create(model=agent["name"], messages=messages, tools=TOOLS, extra_headers=task)
    assert finish == "stop" and "THREAD-BODY" in final.choices[0].message.content  # the retry replays the answer


def test_side_requests_leave_no_trace_in_the_agents_thread(
    client: openai.OpenAI, make_agent: Callable[..., dict], stack: dict[str, Any]
) -> None:
    agent = make_agent()
    client.chat.completions.create(model=agent["name"], messages=[user("SAY:first real turn")])
    enhance = (
        "Generate an enhanced version of this prompt (reply with only the enhanced prompt - no conversation, "
        "explanations, lead-in, bullet points, placeholders, or surrounding quotes):\n\nSIDE-MARKER SAY:done"
    )
    side = client.chat.completions.create(model=agent["name"], messages=[user(enhance)])
    assert side.choices[0].message.content
    client.chat.completions.create(model=agent["name"], messages=[user("SAY:second real turn")])
    seen_by_model = json.dumps(letta_dev.model_requests(stack)[-1]["messages"])
    assert "first real turn" in seen_by_model and "SIDE-MARKER" not in seen_by_model


def test_system_prompt_memory_block_on_real_letta(stack: dict[str, Any], make_agent: Callable[..., dict]) -> None:
    """The Letta calls behind GATEWAY_SYSTEM_PROMPT=memory_block: create + attach the first time, update after."""
    import httpx

    from letta_gateway.agents import LettaAgents
    from letta_gateway.settings import Settings

    agent = make_agent()
    agents = LettaAgents(Settings(letta_base_url=stack["letta_base_url"], gateway_api_keys=("x",)))

    async def write(value: str) -> None:
        await agents.write_block(agent["id"], "client_system_prompt", value, 5000, "client system prompt")
        await agents.aclose()

    asyncio.run(write("first version"))
    asyncio.run(write("second version"))
    block = httpx.get(
        f"{stack['letta_base_url']}/v1/agents/{agent['id']}/core-memory/blocks/client_system_prompt", timeout=30
    ).json()
    assert block["value"] == "second version"

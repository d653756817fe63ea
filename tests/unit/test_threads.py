"""Threads: one agent, many Letta conversations sharing its memory, chosen per request by header."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.support.letta_double import LettaDouble

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}}}]


def chat(client: openai.OpenAI, messages: list[dict], **headers: str):
    return client.chat.completions.create(
        model="coder",
        messages=messages,
        tools=TOOLS,
        extra_headers={k.replace("_", "-"): v for k, v in headers.items()},
    )


def posts(letta: LettaDouble) -> list[tuple[str | None, str]]:
    return [(r["conversation_id"], r["path"]) for r in letta.requests]


def test_chat_keys_map_to_their_own_conversations(client: openai.OpenAI, letta: LettaDouble) -> None:
    letta.add_agent("coder")
    same = [{"role": "user", "content": "SAY:identical transcript"}]
    chat(client, same, X_Letta_Chat_Key="chat-a")
    chat(client, same, X_Letta_Chat_Key="chat-b")  # the same words in another chat must not cross-wire
    chat(client, same, X_Letta_Chat_Key="chat-a")
    conversations = [c for c, _ in posts(letta)]
    assert conversations[0] == conversations[2] != conversations[1]
    assert all(c is not None for c in conversations) and len(letta.conversations) == 2


def test_a_pause_in_one_thread_never_blocks_another(client: openai.OpenAI, letta: LettaDouble) -> None:
    letta.add_agent("coder")
    messages = [{"role": "user", "content": "CALL:read_file {}"}]
    paused = chat(client, messages, X_Letta_Chat_Key="task-1")
    assert paused.choices[0].finish_reason == "tool_calls"
    other = chat(client, [{"role": "user", "content": "SAY:meanwhile"}], X_Letta_Chat_Key="task-2")
    default = chat(client, [{"role": "user", "content": "SAY:default thread"}])
    assert other.choices[0].message.content == "meanwhile" and default.choices[0].message.content == "default thread"
    call = paused.choices[0].message.tool_calls[0]
    messages += [
        paused.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "T1"},
    ]
    # the results belong to task-1's thread: without its header they are unknown to the default thread
    with pytest.raises(openai.NotFoundError):
        chat(client, messages)
    resumed = chat(client, messages, X_Letta_Chat_Key="task-1")
    assert resumed.choices[0].message.content == f"Done. Tool results: {call.id}=T1"


def test_explicit_conversation_id(client: openai.OpenAI, letta_url: str, letta: LettaDouble) -> None:
    agent = letta.add_agent("coder")
    other = letta.add_agent("other")
    mine = httpx.post(f"{letta_url}/v1/conversations/", params={"agent_id": agent.id}, json={}).json()["id"]
    theirs = httpx.post(f"{letta_url}/v1/conversations/", params={"agent_id": other.id}, json={}).json()["id"]
    chat(client, [{"role": "user", "content": "SAY:x"}], X_Letta_Conversation_Id=mine)
    assert posts(letta) == [(mine, f"/v1/conversations/{mine}/messages")]
    for conversation in (theirs, "conv-missing"):
        with pytest.raises(openai.NotFoundError) as info:
            chat(client, [{"role": "user", "content": "SAY:x"}], X_Letta_Conversation_Id=conversation)
        assert info.value.body["code"] == "conversation_not_found"


def test_open_webui_chat_id_counts_for_streamed_requests_only(client: openai.OpenAI, letta: LettaDouble) -> None:
    letta.add_agent("coder")
    stream = client.chat.completions.create(
        model="coder",
        stream=True,
        extra_headers={"X-OpenWebUI-Chat-Id": "owui-1"},
        messages=[{"role": "user", "content": "SAY:in the chat"}],
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "in the chat"
    client.chat.completions.create(
        model="coder",
        extra_headers={"X-OpenWebUI-Chat-Id": "owui-1"},
        messages=[{"role": "user", "content": "SAY:a title"}],
    )  # title generation
    assert [c for c, _ in posts(letta)] == [next(iter(letta.conversations)), None]


COMPLETION = {
    "type": "function",
    "function": {
        "name": "attempt_completion",
        "parameters": {"type": "object", "properties": {"result": {"type": "string"}}, "required": ["result"]},
    },
}


def test_auto_threads_give_each_new_chat_its_own_conversation(client: openai.OpenAI, letta: LettaDouble) -> None:
    """Two chats with the same words: each gets its conversation, and each follow-up finds its own again by the
    tool call ids the gateway issued in it."""
    letta.add_agent("coder")
    tools = [*TOOLS, COMPLETION]
    auto = {"X-Letta-Thread-Mode": "auto"}

    def turn(messages: list[dict]):
        return client.chat.completions.create(model="coder", messages=messages, tools=tools, extra_headers=auto)

    first = [{"role": "user", "content": "CALL:read_file {}"}]
    chat_a, chat_b = turn(first), turn(first)
    conversations = [r["conversation_id"] for r in letta.requests]
    assert len(set(conversations)) == 2 and None not in conversations
    for reply, expected in ((chat_a, conversations[0]), (chat_b, conversations[1])):
        call = reply.choices[0].message.tool_calls[0]
        follow = [
            *first,
            reply.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "R"},
        ]
        answer = turn(follow)  # resumes in the chat's conversation, answered as attempt_completion
        assert letta.requests[-1]["conversation_id"] == expected
        completion = answer.choices[0].message.tool_calls[0]
        assert completion.function.name == "attempt_completion"
        feedback = [
            *follow,
            answer.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": completion.id, "content": "SAY:thanks"},
        ]
        turn(feedback)  # the completion's feedback finds the conversation by the synthetic call's id
        assert letta.requests[-1]["conversation_id"] == expected
    assert len(letta.conversations) == 2


def test_agent_mode_is_the_default(client: openai.OpenAI, letta: LettaDouble) -> None:
    letta.add_agent("coder")
    client.chat.completions.create(model="coder", messages=[{"role": "user", "content": "SAY:x"}])
    assert [r["conversation_id"] for r in letta.requests] == [None] and letta.conversations == {}
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="coder",
            messages=[{"role": "user", "content": "x"}],
            extra_headers={"X-Letta-Thread-Mode": "sometimes"},
        )

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

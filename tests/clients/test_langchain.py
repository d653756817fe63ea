"""LangChain's `ChatOpenAI` (langchain-openai) with `bind_tools`, streamed and not, against the gateway and the Letta
double."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI  # a dev dependency (pyproject): missing, this module fails to import

from tests.conftest import ALICE
from tests.support.letta_double import LettaDouble

TOOL_OUTPUT = "FILE<src/app.py>:42 lines"


@tool
def read_file(path: str) -> str:
    """Read a file of the workspace and return its contents."""
    return TOOL_OUTPUT if path == "src/app.py" else "no such file"


@pytest.fixture
def coder(letta: LettaDouble):
    return letta.add_agent("coder")


@pytest.fixture
def llm(gateway_url: str) -> ChatOpenAI:
    return ChatOpenAI(
        model="coder", base_url=f"{gateway_url}/v1", api_key=ALICE, max_retries=0, timeout=30, stream_usage=True
    )


def streamed(runnable: Any, messages: list[Any]) -> tuple[AIMessageChunk, int]:
    """Adds the chunks up the way LangChain users do; returns the whole message and the number of chunks."""
    total: AIMessageChunk | None = None
    count = 0
    for chunk in runnable.stream(messages):
        total = chunk if total is None else total + chunk
        count += 1
    assert total is not None
    return total, count


def test_streamed_text_turn(llm: ChatOpenAI, coder) -> None:
    message, chunks = streamed(
        llm, [SystemMessage("You are helpful."), HumanMessage("THINK:Weighing it SAY:Hello from LangChain")]
    )
    assert message.content == "Hello from LangChain"
    assert chunks > 3  # token by token
    assert message.response_metadata["finish_reason"] == "stop"
    assert message.usage_metadata is not None
    assert (message.usage_metadata["input_tokens"], message.usage_metadata["output_tokens"]) == (10, 5)
    # ChatOpenAI does not read `reasoning_content` (documented: provider-specific subclasses do): nothing leaks
    # into the text either
    assert "Weighing" not in message.content


def test_non_streamed_text_turn(llm: ChatOpenAI, coder) -> None:
    message = llm.invoke([HumanMessage("SAY:Plain answer")])
    assert isinstance(message, AIMessage) and message.content == "Plain answer"
    assert message.response_metadata["finish_reason"] == "stop"
    assert message.usage_metadata["total_tokens"] == 15


@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
def test_tool_round_trip_with_bind_tools(llm: ChatOpenAI, letta: LettaDouble, coder, stream: bool) -> None:
    bound = llm.bind_tools([read_file])
    messages: list[Any] = [HumanMessage('CALL:read_file {"path": "src/app.py"}')]
    paused = streamed(bound, messages)[0] if stream else bound.invoke(messages)
    [call] = paused.tool_calls
    assert (call["name"], call["args"]) == ("read_file", {"path": "src/app.py"})
    assert call["id"].startswith("call_")
    assert paused.response_metadata["finish_reason"] == "tool_calls"
    if stream:
        assert paused.tool_call_chunks[0]["index"] == 0
    messages += [paused, read_file.invoke(call)]  # a ToolMessage answering call["id"]
    final = streamed(bound, messages)[0] if stream else bound.invoke(messages)
    assert final.content == f"Done. Tool results: {call['id']}={TOOL_OUTPUT}"
    assert final.tool_calls == []
    assert final.response_metadata["finish_reason"] == "stop"
    [approval] = letta.approvals_received(coder.id)
    assert approval["approvals"][0]["tool_return"] == TOOL_OUTPUT

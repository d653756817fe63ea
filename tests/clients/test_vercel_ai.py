"""The Vercel AI SDK with `@ai-sdk/openai-compatible` (what Cline uses; tests/clients/node/vercel_ai.mjs) against the
gateway and the Letta double."""

from __future__ import annotations

import pytest

from tests.clients.conftest import run_node
from tests.support.letta_double import LettaDouble

SCRIPT = "vercel_ai.mjs"
TOOL_OUTPUT = "FILE<src/app.py>:42 lines"  # what the script's read_file returns
USAGE = {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}


@pytest.fixture
def coder(letta: LettaDouble):
    return letta.add_agent("coder")


def usage_of(result: dict) -> dict:
    return {k: result["usage"][k] for k in USAGE}


def test_streamed_text_turn_with_reasoning(node: str, gateway_url: str, coder) -> None:
    result = run_node(node, SCRIPT, "stream-text", gateway_url, "coder")
    assert result["text"] == result["finalText"] == "Hello from the Vercel AI SDK"
    assert result["parts"]["text-delta"] == 6  # token by token
    # reasoning_content is read by the SDK and exposed as reasoning
    assert result["reasoning"] == result["reasoningText"] == "Weighing a greeting"
    assert result["finishReason"] == result["rawFinishReason"] == "stop"
    assert usage_of(result) == USAGE  # includeUsage: the usage chunk was read
    assert result["requestBody"]["stream_options"] == {"include_usage": True}
    assert result["warnings"] == []


def test_tool_round_trip_streamed_like_cline(node: str, gateway_url: str, letta: LettaDouble, coder) -> None:
    result = run_node(node, SCRIPT, "tool-stream", gateway_url, "coder")
    first, second = result["first"], result["second"]
    [call] = first["toolCalls"]
    assert (call["name"], call["input"]) == ("read_file", {"path": "src/app.py"})
    assert first["finishReason"] == "tool-calls" and first["rawFinishReason"] == "tool_calls"
    assert first["parts"]["tool-input-delta"] == 2  # the arguments arrived in fragments and were reassembled
    assert usage_of(first) == USAGE
    # what the SDK sent back: the assistant tool call (content null, arguments re-serialised) and the tool result
    assert second["requestBody"]["roles"] == ["user", "assistant", "tool"]
    assistant, tool_message = result["resumeMessages"][1:]
    assert assistant["content"] is None and assistant["tool_calls"][0]["id"] == call["id"]
    assert tool_message == {"role": "tool", "tool_call_id": call["id"], "content": TOOL_OUTPUT}
    assert second["text"] == f"Done. Tool results: {call['id']}={TOOL_OUTPUT}"
    assert second["finishReason"] == "stop" and second["toolCalls"] == []
    [approval] = letta.approvals_received(coder.id)
    assert approval["approvals"][0]["tool_return"] == TOOL_OUTPUT


def test_tool_round_trip_with_generate_text_executing_the_tool(
    node: str, gateway_url: str, letta: LettaDouble, coder
) -> None:
    """Non-streamed, the SDK's own loop: the tool's `execute` runs and its result goes back in step two."""
    result = run_node(node, SCRIPT, "generate-tools", gateway_url, "coder")
    assert result["toolArgs"] == [{"path": "src/app.py"}]
    first, second = result["steps"]
    assert first["finishReason"] == "tool-calls" and first["toolCalls"][0]["name"] == "read_file"
    assert first["reasoningText"] == "I need the file first"  # reasoning_content of a non-streamed answer
    assert second["finishReason"] == "stop" and second["toolCalls"] == []
    assert result["text"] == f"Done. Tool results: {first['toolCalls'][0]['id']}={TOOL_OUTPUT}"
    assert result["totalUsage"]["totalTokens"] == 30
    # the SDK sends the step's reasoning back on the assistant message (`reasoning_content`): accepted
    assert [m["role"] for m in result["resumeMessages"]] == ["user", "assistant", "tool"]
    assert result["resumeMessages"][1]["reasoning_content"] == "I need the file first"
    assert len(letta.approvals_received(coder.id)) == 1


def test_errors_surface_as_sdk_errors(node: str, gateway_url: str, letta: LettaDouble, coder) -> None:
    letta.stream_fault = "truncated"  # Letta's next stream ends without a stop reason
    result = run_node(node, SCRIPT, "errors", gateway_url, "coder")
    http = result["http"]
    assert (http["class"], http["statusCode"], http["isRetryable"]) == ("APICallError", 404, False)
    assert http["message"].startswith("The model 'no-such-agent' does not exist")  # read from the error envelope
    assert http["data"]["error"]["code"] == "model_not_found"
    stream = result["stream"]
    # the mid-stream `data: {"error": …}` event becomes an error part (the envelope's error object) and the
    # step finishes with reason "error", after the text so far
    [error] = stream["errors"]
    assert error["message"] == "Letta's stream ended before it was complete."
    assert stream["text"] == "cut short" and stream["finishReason"] == "error"

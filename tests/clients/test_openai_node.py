"""The official `openai` Node SDK (tests/clients/node/openai_node.mjs) against the gateway and the Letta double, in
two majors: `openai` (the newest that runs on Node 20) and `openai-v5` (the major Roo Code ships)."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from tests.clients import conftest
from tests.support.letta_double import LettaDouble

SCRIPT = "openai_node.mjs"
TOOL_OUTPUT = "FILE<src/app.py>:42 lines"  # what the script's read_file returns
SDKS = {"openai": "6.30.1", "openai-v5": "5.23.2"}  # package (package.json) -> the version it pins


@pytest.fixture(params=sorted(SDKS))
def sdk(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def run_sdk(sdk: str) -> Any:
    """conftest.run_node with OPENAI_PACKAGE set: each test runs once per SDK major."""
    return partial(conftest.run_node, extra_env={"OPENAI_PACKAGE": sdk})


@pytest.fixture
def coder(letta: LettaDouble):
    return letta.add_agent("coder")


def test_streamed_text_turn(node: str, gateway_url: str, letta: LettaDouble, coder, run_sdk, sdk: str) -> None:
    result = run_sdk(node, SCRIPT, "stream-text", gateway_url, "coder")
    assert result["sdkVersion"] == SDKS[sdk]
    assert result["models"] == ["coder"]
    assert result["role"] == "assistant"
    assert result["content"] == "Hello from the Node SDK"
    assert result["contentDeltas"] == 5  # token by token, not one lump
    assert result["reasoning"] == "Weighing a greeting"
    assert result["finish"] == "stop"
    assert result["deltasWithoutContent"] == 0
    assert (result["usage"]["prompt_tokens"], result["usage"]["completion_tokens"]) == (10, 5)
    # only the new user message reaches the agent (not the system prompt)
    [post] = letta.message_posts(coder.id)
    assert [m["role"] for m in post["messages"]] == ["user"]


def test_tool_round_trip_with_the_stream_helper(
    node: str, gateway_url: str, letta: LettaDouble, coder, run_sdk
) -> None:
    result = run_sdk(node, SCRIPT, "tool-stream", gateway_url, "coder")
    assert result["firstFinish"] == "tool_calls"
    [call] = result["toolCalls"]
    assert (call["type"], call["name"], call["arguments"]) == ("function", "read_file", '{"path": "src/app.py"}')
    assert result["argumentEvents"] == [{"name": "read_file", "index": 0, "arguments": '{"path": "src/app.py"}'}]
    assert result["firstUsage"]["total_tokens"] == 15
    # the assistant message went back as the SDK assembled it, SDK-only fields included, and was accepted
    assert {"parsed", "refusal"} <= set(result["sentAssistantKeys"])
    assert result["finalFinish"] == "stop"
    assert result["finalContent"] == f"Done. Tool results: {call['id']}={TOOL_OUTPUT}"
    [approval] = letta.approvals_received(coder.id)
    assert approval["approvals"][0]["tool_return"] == TOOL_OUTPUT


@pytest.mark.parametrize("scenario", ["run-tools", "run-tools-stream"])
def test_tool_round_trip_with_run_tools(
    node: str, gateway_url: str, letta: LettaDouble, coder, run_sdk, scenario: str
) -> None:
    """The SDK's own tool loop calls the tool and sends the result back without help."""
    result = run_sdk(node, SCRIPT, scenario, gateway_url, "coder")
    assert result["toolArgs"] == [{"path": "src/app.py"}]
    assert result["roles"] == ["user", "assistant", "tool", "assistant"]
    assert result["finishReasons"] == ["tool_calls", "stop"]
    assert result["finalContent"].startswith("Done. Tool results: call_") and result["finalContent"].endswith(
        f"={TOOL_OUTPUT}"
    )
    assert len(letta.approvals_received(coder.id)) == 1


def test_errors_surface_as_sdk_errors(node: str, gateway_url: str, letta: LettaDouble, coder, run_sdk) -> None:
    letta.stream_fault = "truncated"  # Letta's next stream ends without a stop reason
    result = run_sdk(node, SCRIPT, "errors", gateway_url, "coder")
    http = result["http"]
    assert (http["class"], http["status"], http["code"], http["type"], http["param"]) == (
        "NotFoundError",
        404,
        "model_not_found",
        "invalid_request_error",
        "model",
    )
    stream = result["stream"]
    # the gateway's `data: {"error": …}` event becomes an APIError carrying its code, after the text so far
    assert (stream["thrown"], stream["class"], stream["code"], stream["type"]) == (
        True,
        "APIError",
        "upstream_incomplete",
        "api_error",
    ), stream
    assert stream["content"] == "cut short"

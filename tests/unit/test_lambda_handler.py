"""The Lambda entry fed with the API Gateway events in events/ (the Docker-free twin of `sam local invoke`):
one warm process, several invocations, against the Letta double."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.letta_double import LettaDouble

EVENTS = Path(__file__).resolve().parents[2] / "events"
DEMO_KEY = "sk-demo-local-key"


class Context:
    function_name = "GatewayFunction"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:GatewayFunction"
    aws_request_id = "lambda-request-1"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 29_000


def event(name: str, **body_changes: Any) -> dict[str, Any]:
    data = json.loads((EVENTS / f"{name}.json").read_text())
    if body_changes:
        body = json.loads(data["body"])
        body.update(body_changes)
        data["body"] = json.dumps(body)
    return data


@pytest.fixture
def handler(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, letta_url: str, letta: LettaDouble):
    monkeypatch.setenv("LETTA_BASE_URL", letta_url)
    monkeypatch.setenv("LETTA_API_KEY", "letta-secret-for-tests-42")
    monkeypatch.setenv("GATEWAY_API_KEYS", DEMO_KEY)
    monkeypatch.setenv("GATEWAY_STATE_PATH", str(tmp_path / "state.sqlite3"))
    monkeypatch.delenv("GATEWAY_STATE_TABLE", raising=False)
    sys.modules.pop("letta_gateway.handler", None)
    module = importlib.import_module("letta_gateway.handler")
    yield module.handler
    sys.modules.pop("letta_gateway.handler", None)


def invoke(handler: Any, name: str, **body_changes: Any) -> tuple[int, dict[str, str], str]:
    response = handler(event(name, **body_changes), Context())
    return response["statusCode"], {k.lower(): v for k, v in response["headers"].items()}, response["body"]


def test_every_event_through_one_warm_handler(handler: Any, letta: LettaDouble) -> None:
    agent = letta.add_agent("demo-agent")

    status, _, body = invoke(handler, "health")
    assert status == 200 and json.loads(body)["status"] == "ok"

    status, _, body = invoke(handler, "models")
    assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == ["demo-agent"]

    status, _, body = invoke(handler, "model")
    assert status == 200 and json.loads(body)["id"] == "demo-agent"

    status, headers, body = invoke(handler, "chat")
    assert status == 200 and headers["content-type"] == "application/json"
    assert json.loads(body)["choices"][0]["finish_reason"] == "stop"

    status, headers, body = invoke(handler, "chat-stream")
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    frames = [f for f in body.split("\n\n") if f]
    assert frames[-1] == "data: [DONE]"
    chunks = [json.loads(f[6:]) for f in frames if f.startswith("data: {")]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 15
    assert "".join(c["choices"][0]["delta"]["content"] for c in chunks if c["choices"]).startswith("Hello")

    # The pause the tool-result event continues: the agent calls read_file as call_demo_1.
    letta.next_tool_call_ids.append("call_demo_1")
    status, _, body = invoke(
        handler, "chat", messages=[{"role": "user", "content": 'CALL:read_file {"path": "README.md"}'}]
    )
    call = json.loads(body)["choices"][0]["message"]["tool_calls"][0]
    assert (status, call["id"], call["function"]["name"]) == (200, "call_demo_1", "read_file")

    status, _, body = invoke(handler, "tool-result")
    assert status == 200
    assert json.loads(body)["choices"][0]["message"]["content"] == "Done. Tool results: call_demo_1=file body"
    assert len(letta.approvals_received(agent.id)) == 1


def test_handler_errors_are_envelopes(handler: Any, letta: LettaDouble) -> None:
    bad = event("chat")
    bad["headers"]["Authorization"] = bad["multiValueHeaders"]["Authorization"][0] = "Bearer nope"
    response = handler(bad, Context())
    assert response["statusCode"] == 401 and json.loads(response["body"])["error"]["code"] == "invalid_api_key"
    status, _, body = invoke(handler, "chat")  # no agent named demo-agent
    assert status == 404 and json.loads(body)["error"]["code"] == "model_not_found"


def test_correlation_id_is_the_api_gateway_request_id(handler: Any, letta: LettaDouble, caplog) -> None:
    ev = event("health")
    _, headers, _ = invoke(handler, "health")
    assert headers["x-request-id"] == ev["requestContext"]["requestId"]
    ids = [getattr(r, "correlation_id", None) for r in caplog.records if r.getMessage() == "request"]
    assert ids == [ev["requestContext"]["requestId"]]

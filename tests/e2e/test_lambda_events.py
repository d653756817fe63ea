"""The Lambda path against the real Letta: the events in events/ fed through the Mangum handler, one warm process."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import letta_dev

EVENTS = Path(__file__).resolve().parents[2] / "events"
DEMO_KEY = "sk-demo-local-key"


class Context:
    aws_request_id = "e2e-lambda"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 29_000


def event(name: str, **body: Any) -> dict[str, Any]:
    data = json.loads((EVENTS / f"{name}.json").read_text())
    if body:
        data["body"] = json.dumps({**json.loads(data["body"]), **body})
    return data


@pytest.fixture
def handler(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stack: dict[str, Any]):
    letta_dev.create_agent(stack["letta_base_url"], "demo-agent")
    monkeypatch.setenv("LETTA_BASE_URL", stack["letta_base_url"])
    monkeypatch.setenv("GATEWAY_API_KEYS", DEMO_KEY)
    monkeypatch.setenv("GATEWAY_STATE_PATH", str(tmp_path / "state.sqlite3"))
    monkeypatch.delenv("GATEWAY_STATE_TABLE", raising=False)
    monkeypatch.setenv("LETTA_HTTP_CLIENT", "httpx")  # the Lambda layer has no aiohttp
    sys.modules.pop("letta_gateway.handler", None)
    module = importlib.import_module("letta_gateway.handler")
    yield module.handler
    # A Lambda environment is frozen, then dropped, with its connections open; this process lives on.
    asyncio.get_event_loop().run_until_complete(module.app.state.gateway.aclose())
    sys.modules.pop("letta_gateway.handler", None)


def call(handler: Any, name: str, **body: Any) -> tuple[int, str]:
    response = handler(event(name, **body), Context())
    return response["statusCode"], response["body"]


def test_events_through_the_lambda_handler_against_real_letta(handler: Any) -> None:
    assert call(handler, "health")[0] == 200
    status, body = call(handler, "models")
    assert status == 200 and "demo-agent" in [m["id"] for m in json.loads(body)["data"]]
    status, body = call(handler, "model")
    assert status == 200 and json.loads(body)["id"] == "demo-agent"

    status, body = call(handler, "chat", messages=[{"role": "user", "content": "SAY:lambda says hi"}])
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "lambda says hi"

    status, body = call(handler, "chat-stream", messages=[{"role": "user", "content": "SAY:streamed via mangum"}])
    frames = [f for f in body.split("\n\n") if f]
    assert status == 200 and frames[-1] == "data: [DONE]"
    chunks = [json.loads(f[6:]) for f in frames if f.startswith("data: {")]
    assert "".join(c["choices"][0]["delta"]["content"] for c in chunks if c["choices"]) == "streamed via mangum"
    assert chunks[-1]["usage"]["total_tokens"] > 0

    # The tool-result event's round trip, with the tool call id the real agent issues.
    ask = [{"role": "user", "content": 'CALL:read_file {"path": "README.md"}'}]
    status, body = call(handler, "chat", messages=ask)
    message = json.loads(body)["choices"][0]["message"]
    assert status == 200 and message["tool_calls"][0]["function"]["name"] == "read_file"
    call_id = message["tool_calls"][0]["id"]
    template = json.loads(event("tool-result")["body"])["messages"]
    template[1]["tool_calls"][0]["id"] = call_id
    template[2]["tool_call_id"] = call_id
    status, body = call(handler, "tool-result", messages=[ask[0], template[1], template[2]])
    assert status == 200
    assert "file body" in json.loads(body)["choices"][0]["message"]["content"]

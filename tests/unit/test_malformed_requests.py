"""Bad input never makes a 5xx: each malformed request gets a 4xx OpenAI error envelope."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.testclient import TestClient

from letta_gateway.app import create_app
from letta_gateway.store.sqlite import SQLiteBackend
from tests.conftest import ALICE, make_gateway

AUTH = {"Authorization": f"Bearer {ALICE}"}
OK_USER = {"role": "user", "content": "hi"}
CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def body(**fields: Any) -> bytes:
    return json.dumps({"model": "coder", "messages": [OK_USER], **fields}).encode()


def raw(data: Any) -> bytes:
    return json.dumps(data).encode()


CASES: list[tuple[str, bytes, dict[str, str]]] = [
    ("not json", b"{nope", {}),
    ("truncated json", b'{"model": "coder", "messages": [', {}),
    ("invalid utf-8", b'{"model": "\xff\xfe", "messages": []}', {}),
    ("empty body", b"", {}),
    ("json array", raw([1, 2]), {}),
    ("json string", raw("hello"), {}),
    ("json null", b"null", {}),
    ("text/plain", body(), {"Content-Type": "text/plain"}),
    ("form encoded", b"model=coder", {"Content-Type": "application/x-www-form-urlencoded"}),
    ("missing model", raw({"messages": [OK_USER]}), {}),
    ("empty model", body(model=""), {}),
    ("model is a number", body(model=7), {}),
    ("model absurdly long", body(model="a" * 5000), {}),
    ("missing messages", raw({"model": "coder"}), {}),
    ("messages not a list", body(messages="hi"), {}),
    ("empty messages", body(messages=[]), {}),
    ("message not an object", body(messages=["hi"]), {}),
    ("unknown role", body(messages=[{"role": "wizard", "content": "x"}]), {}),
    ("function role", body(messages=[{"role": "function", "name": "f", "content": "x"}]), {}),
    ("missing role", body(messages=[{"content": "x"}]), {}),
    ("user content number", body(messages=[{"role": "user", "content": 42}]), {}),
    ("user content null", body(messages=[{"role": "user", "content": None}]), {}),
    ("user content empty", body(messages=[{"role": "user", "content": ""}]), {}),
    ("user content empty parts", body(messages=[{"role": "user", "content": []}]), {}),
    ("unknown part type", body(messages=[{"role": "user", "content": [{"type": "video", "url": "x"}]}]), {}),
    ("audio part", body(messages=[{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]), {}),
    ("image without url", body(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]), {}),
    (
        "image bad scheme",
        body(
            messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}]
        ),
        {},
    ),
    (
        "image bad base64",
        body(
            messages=[
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%"}}]}
            ]
        ),
        {},
    ),
    (
        "image data url not image",
        body(
            messages=[
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:text/html;base64,PGI+"}}]}
            ]
        ),
        {},
    ),
    ("only system", body(messages=[{"role": "system", "content": "s"}]), {}),
    ("ends with assistant", body(messages=[OK_USER, {"role": "assistant", "content": "a"}]), {}),
    ("tool without tool call", body(messages=[OK_USER, {"role": "tool", "tool_call_id": "x", "content": "r"}]), {}),
    (
        "tool missing tool_call_id",
        body(messages=[{"role": "assistant", "tool_calls": [CALL]}, {"role": "tool", "content": "r"}]),
        {},
    ),
    (
        "duplicate tool results",
        body(
            messages=[
                {"role": "assistant", "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_1", "content": "r"},
                {"role": "tool", "tool_call_id": "call_1", "content": "r"},
            ]
        ),
        {},
    ),
    (
        "tool result after user",
        body(
            messages=[
                {"role": "assistant", "tool_calls": [CALL]},
                OK_USER,
                {"role": "tool", "tool_call_id": "call_1", "content": "r"},
            ]
        ),
        {},
    ),
    (
        "assistant tool_calls malformed",
        body(messages=[{"role": "assistant", "tool_calls": [{"id": "x"}]}, OK_USER]),
        {},
    ),
    ("tools not a list", body(tools={"type": "function"}), {}),
    ("tool type unknown", body(tools=[{"type": "retrieval"}]), {}),
    ("tool without function", body(tools=[{"type": "function"}]), {}),
    ("tool name invalid", body(tools=[{"type": "function", "function": {"name": "has space"}}]), {}),
    ("tool name too long", body(tools=[{"type": "function", "function": {"name": "x" * 65}}]), {}),
    (
        "tool parameters not object schema",
        body(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]),
        {},
    ),
    ("tool parameters not a dict", body(tools=[{"type": "function", "function": {"name": "f", "parameters": 3}}]), {}),
    ("duplicate tool names", body(tools=[{"type": "function", "function": {"name": "f"}}] * 2), {}),
    ("tool_choice required", body(tool_choice="required", tools=[{"type": "function", "function": {"name": "f"}}]), {}),
    ("tool_choice bogus", body(tool_choice="sometimes"), {}),
    ("n = 2", body(n=2), {}),
    ("n = 0", body(n=0), {}),
    ("max_tokens absurd", body(max_tokens=10**12), {}),
    ("max_tokens negative", body(max_tokens=-5), {}),
    ("temperature too high", body(temperature=3.5), {}),
    ("top_p negative", body(top_p=-1), {}),
    ("stream not bool", body(stream="yes"), {}),
    ("stream_options without stream", body(stream_options={"include_usage": True}), {}),
    ("logprobs requested", body(logprobs=True), {}),
    ("legacy functions", body(functions=[{"name": "f"}]), {}),
]


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    # Letta is unreachable: a malformed request must be refused before anything would be sent.
    gateway = make_gateway("http://127.0.0.1:9", SQLiteBackend(str(tmp_path_factory.mktemp("s") / "s.db")))
    with TestClient(create_app(gateway), raise_server_exceptions=False) as client:
        yield client


def test_there_are_at_least_40_cases() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize(("name", "content", "headers"), CASES, ids=[c[0] for c in CASES])
def test_malformed_request_is_a_4xx_envelope(
    http: TestClient, name: str, content: bytes, headers: dict[str, str]
) -> None:
    response = http.post(
        "/v1/chat/completions", content=content, headers={**AUTH, "Content-Type": "application/json", **headers}
    )
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert "Traceback" not in response.text and "pydantic" not in response.text.lower()

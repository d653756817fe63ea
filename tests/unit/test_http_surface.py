"""Auth, routing and validation: every failure is an OpenAI error envelope with the right status."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from starlette.testclient import TestClient

from letta_gateway.app import create_app, request_deadline
from letta_gateway.store.sqlite import SQLiteBackend
from tests.conftest import ALICE, make_gateway

AUTH = {"Authorization": f"Bearer {ALICE}"}


@pytest.fixture
def http(letta_url: str, letta, tmp_path) -> TestClient:
    letta.add_agent("coder")
    app = create_app(make_gateway(letta_url, SQLiteBackend(str(tmp_path / "s.db"))), max_body_bytes=4096)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def envelope_of(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def test_health_needs_no_auth_and_no_letta(http: TestClient, letta) -> None:
    response = http.get("/health")
    assert response.status_code == 200 and response.json()["status"] == "ok"
    assert letta.list_calls == 0 and letta.requests == []


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, "missing_api_key"),
        ({"Authorization": "Bearer wrong"}, "invalid_api_key"),
        ({"Authorization": f"Basic {ALICE}"}, "missing_api_key"),
        ({"Authorization": "Bearer "}, "missing_api_key"),
    ],
)
@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/v1/models"), ("GET", "/v1/models/coder"), ("POST", "/v1/chat/completions")]
)
def test_v1_requires_a_gateway_key(
    http: TestClient, method: str, path: str, headers: dict[str, str], code: str
) -> None:
    response = http.request(method, path, headers=headers, json={"model": "coder", "messages": []})
    assert response.status_code == 401
    error = envelope_of(response)
    assert error["type"] == "authentication_error" and error["code"] == code
    assert ALICE not in response.text


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "coder"}, "messages"),
        ({"model": "coder", "messages": []}, "messages"),
        ({"model": "coder", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0]"),
        ({"model": "coder", "messages": [{"role": "user", "content": 5}]}, "messages[0].user.content.str"),
        ({"model": "coder", "messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool.tool_call_id"),
        (
            {
                "model": "coder",
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "function", "function": {"name": "bad name!"}}],
            },
            "tools[0].function.name",
        ),
        (
            {
                "model": "coder",
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}],
            },
            "tools[0].function.parameters",
        ),
        ({"model": "coder", "messages": [{"role": "user", "content": "x"}], "temperature": 9}, "temperature"),
        ({"model": "coder", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}, "max_tokens"),
        ({"model": "coder", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream"),
        ({"model": "coder", "messages": [{"role": "user", "content": "x"}], "n": 3}, "n"),
    ],
)
def test_validation_errors_are_400_envelopes(http: TestClient, body: dict[str, Any], param: str) -> None:
    response = http.post("/v1/chat/completions", headers=AUTH, json=body)
    assert response.status_code == 400, response.text
    error = envelope_of(response)
    assert error["type"] == "invalid_request_error" and error["param"] == param


@pytest.mark.parametrize(
    ("content", "headers"),
    [
        (b"{not json", {}),
        (b"\xff\xfe\xfa", {}),
        (b"[1, 2]", {}),
        (b"", {}),
        (b'{"model": "coder"}', {"Content-Type": "text/plain"}),
    ],
)
def test_undecodable_bodies_are_400(http: TestClient, content: bytes, headers: dict[str, str]) -> None:
    response = http.post(
        "/v1/chat/completions", headers={**AUTH, "Content-Type": "application/json", **headers}, content=content
    )
    assert response.status_code == 400
    assert envelope_of(response)["type"] == "invalid_request_error"


def test_oversized_body_is_413(http: TestClient) -> None:
    body = {"model": "coder", "messages": [{"role": "user", "content": "x" * 5000}]}
    response = http.post("/v1/chat/completions", headers=AUTH, json=body)
    assert response.status_code == 413 and envelope_of(response)["code"] == "request_too_large"


def test_oversized_chunked_body_is_413(http: TestClient) -> None:
    def chunks():
        yield b'{"model": "coder", "messages": [{"role": "user", "content": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}]}'

    response = http.post("/v1/chat/completions", headers={**AUTH, "Content-Type": "application/json"}, content=chunks())
    assert response.status_code == 413 and envelope_of(response)["code"] == "request_too_large"


def test_unknown_path_and_wrong_method(http: TestClient) -> None:
    missing = http.get("/v1/nothing", headers=AUTH)
    assert missing.status_code == 404 and envelope_of(missing)["code"] == "unknown_url"
    wrong = http.get("/v1/chat/completions", headers=AUTH)
    assert wrong.status_code == 405 and envelope_of(wrong)["code"] == "method_not_allowed"


def test_responses_carry_a_request_id(http: TestClient) -> None:
    assert http.get("/health", headers={"X-Request-Id": "req-123"}).headers["x-request-id"] == "req-123"
    assert len(http.get("/health").headers["x-request-id"]) == 32


def test_lwa_forwarded_request_context_is_the_correlation_id(http: TestClient) -> None:
    context = json.dumps({"requestId": "apigw-req-42", "stage": "prod"})
    assert http.get("/health", headers={"x-amzn-request-context": context}).headers["x-request-id"] == "apigw-req-42"


@pytest.mark.parametrize(
    ("scope", "headers", "budget", "expected"),
    [
        ({}, {}, None, None),
        ({}, {}, 100.0, 98.0),
        ({"aws.context": type("Ctx", (), {"get_remaining_time_in_millis": lambda self: 29_000})()}, {}, None, 27.0),
        ({}, {b"x-amzn-lambda-context": b"DEADLINE"}, 900.0, 58.0),
        ({}, {b"x-amzn-lambda-context": b"not json"}, None, None),
    ],
)
def test_request_deadline(scope: dict, headers: dict, budget: float | None, expected: float | None) -> None:
    if headers.get(b"x-amzn-lambda-context") == b"DEADLINE":
        headers = {b"x-amzn-lambda-context": json.dumps({"deadline": int((time.time() + 60) * 1000)}).encode()}
    got = request_deadline(scope, headers, budget, 2.0)
    if expected is None:
        assert got is None
    else:
        assert got is not None and abs((got - time.monotonic()) - expected) < 0.5

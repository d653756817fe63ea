"""CloudWatch EMF metrics: turns, tool pauses, resumes, errors and Letta latency, flushed once per request."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from letta_gateway import observability
from letta_gateway.app import create_app
from letta_gateway.store.sqlite import SQLiteBackend
from tests.conftest import ALICE, make_gateway
from tests.support.letta_double import LettaDouble

AUTH = {"Authorization": f"Bearer {ALICE}"}
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}}}]


def emitted(out: str) -> list[dict]:
    lines = [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]
    return [{name: value for name, value in line.items() if name not in ("_aws", "service")} for line in lines]


@pytest.mark.parametrize("stream", [False, True])
def test_metrics_per_request(
    monkeypatch: pytest.MonkeyPatch, capsys, letta_url: str, letta: LettaDouble, tmp_path, stream: bool
) -> None:
    monkeypatch.setattr(observability, "METRICS_ENABLED", True)
    letta.add_agent("coder")
    app = create_app(make_gateway(letta_url, SQLiteBackend(str(tmp_path / "s.db"))))
    with TestClient(app) as http:
        body = {
            "model": "coder",
            "tools": TOOLS,
            "stream": stream,
            "messages": [{"role": "user", "content": "CALL:read_file {}"}],
        }
        first = http.post("/v1/chat/completions", headers=AUTH, json=body)
        if stream:
            chunks = [json.loads(line[6:]) for line in first.text.splitlines() if line.startswith("data: {")]
            call = next(
                c["choices"][0]["delta"]["tool_calls"][0]
                for c in chunks
                if c["choices"] and c["choices"][0]["delta"].get("tool_calls")
            )
            call = {"id": call["id"], "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
        else:
            call = first.json()["choices"][0]["message"]["tool_calls"][0]
        capsys.readouterr()
        body["messages"] += [
            {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "R"},
        ]
        http.post("/v1/chat/completions", headers=AUTH, json=body)
        resume = emitted(capsys.readouterr().out)
        http.post("/v1/chat/completions", headers={"Authorization": "Bearer wrong"}, json=body)
        rejected = emitted(capsys.readouterr().out)
    latency = "LettaTimeToStream" if stream else "LettaLatency"
    assert len(resume) == 1 and resume[0]["Turns"] == [1.0] and resume[0]["Resumes"] == [1.0]
    assert "ToolPauses" not in resume[0] and resume[0][latency][0] > 0
    assert rejected == [{"ClientErrors": [1.0]}]


def test_metrics_off_outside_lambda(capsys, letta_url: str, letta: LettaDouble, tmp_path) -> None:
    assert observability.METRICS_ENABLED is False  # no AWS_LAMBDA_FUNCTION_NAME, no GATEWAY_METRICS here
    letta.add_agent("coder")
    app = create_app(make_gateway(letta_url, SQLiteBackend(str(tmp_path / "s.db"))))
    with TestClient(app) as http:
        http.post(
            "/v1/chat/completions",
            headers=AUTH,
            json={"model": "coder", "messages": [{"role": "user", "content": "hi"}]},
        )
    assert emitted(capsys.readouterr().out) == []

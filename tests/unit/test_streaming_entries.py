"""One request, two entries: under uvicorn (as the Lambda Web Adapter runs it) chunks arrive as Letta produces them;
through Mangum the same request returns the complete SSE body at once."""

from __future__ import annotations

import importlib
import itertools
import json
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import ALICE
from tests.support.letta_double import LettaDouble

BODY = {"model": "coder", "stream": True, "messages": [{"role": "user", "content": "SAY:one two three four"}]}
EVENTS = Path(__file__).resolve().parents[2] / "events"


def test_uvicorn_delivers_chunks_as_they_come(gateway_url: str, letta: LettaDouble) -> None:
    letta.add_agent("coder")
    letta.delay = 0.25  # Letta produces a word every 250 ms
    arrivals: list[tuple[float, str]] = []
    started = time.monotonic()
    with httpx.stream(
        "POST", f"{gateway_url}/v1/chat/completions", json=BODY, headers={"Authorization": f"Bearer {ALICE}"}
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                delta = (json.loads(line[6:])["choices"] or [{}])[0].get("delta", {})
                if delta.get("content"):
                    arrivals.append((time.monotonic() - started, delta["content"]))
    assert "".join(text for _, text in arrivals) == "one two three four"
    times = [t for t, _ in arrivals]
    assert len(times) == 4
    assert all(later - earlier > 0.15 for earlier, later in itertools.pairwise(times))  # not one burst


def test_mangum_returns_the_same_request_as_a_complete_sse_body(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, letta_url: str, letta: LettaDouble
) -> None:
    letta.add_agent("coder")
    letta.delay = 0.05
    monkeypatch.setenv("LETTA_BASE_URL", letta_url)
    monkeypatch.setenv("GATEWAY_API_KEYS", ALICE)
    monkeypatch.setenv("GATEWAY_STATE_PATH", str(tmp_path / "s.db"))
    sys.modules.pop("letta_gateway.handler", None)
    handler = importlib.import_module("letta_gateway.handler").handler
    event = json.loads((EVENTS / "chat-stream.json").read_text())
    event["headers"]["Authorization"] = event["multiValueHeaders"]["Authorization"][0] = f"Bearer {ALICE}"
    event["body"] = json.dumps(BODY)

    class Context:
        @staticmethod
        def get_remaining_time_in_millis() -> int:
            return 29_000

    response = handler(event, Context())
    sys.modules.pop("letta_gateway.handler", None)
    frames = [f for f in response["body"].split("\n\n") if f]
    assert response["statusCode"] == 200 and frames[-1] == "data: [DONE]"
    chunks = [json.loads(f[6:]) for f in frames if f.startswith("data: {")]
    assert "".join(c["choices"][0]["delta"]["content"] for c in chunks if c["choices"]) == "one two three four"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"

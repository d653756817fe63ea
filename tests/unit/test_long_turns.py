"""Long agent turns: keepalives while Letta is silent, and a clean end before the deployment's deadline."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from itertools import pairwise

import openai
import pytest

from tests.conftest import ALICE, HTTP_CLIENTS, make_gateway
from tests.support import sse
from tests.support.letta_double import LettaDouble

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}}}]


def stream_lines(url: str, body: dict) -> list[tuple[float, str]]:
    return sse.stream_lines(url, body, ALICE)


def test_keepalive_comments_while_letta_is_silent(
    serve: Callable[..., str], letta_url: str, backend_factory, letta: LettaDouble
) -> None:
    letta.add_agent("coder")
    url = serve(make_gateway(letta_url, backend_factory(), keepalive=0.1))
    letta.delay = 0.45  # before every event of the turn
    lines = stream_lines(url, {"model": "coder", "messages": [{"role": "user", "content": "SAY:slow answer"}]})
    texts = [line for _, line in lines]
    assert texts[-1] == "data: [DONE]"
    keepalives = [t for t, line in lines if line == ": keepalive"]
    assert len(keepalives) >= 6
    gaps = [b - a for a, b in pairwise([t for t, _ in lines])]
    assert max(gaps) < 0.4  # once the response started, the client never waits long for a byte
    content = "".join(
        json.loads(line[6:])["choices"][0]["delta"]["content"]
        for line in texts
        if line.startswith("data: {") and json.loads(line[6:])["choices"]
    )
    assert content == "slow answer"


@pytest.mark.parametrize("http_client", HTTP_CLIENTS)
@pytest.mark.parametrize("stream", [False, True])
def test_deadline_ends_the_request_cleanly_and_keeps_tool_calls_answerable(
    serve: Callable[..., str], letta_url: str, backend_factory, letta: LettaDouble, stream: bool, http_client: str
) -> None:
    letta.add_agent("coder")
    url = serve(
        make_gateway(letta_url, backend_factory(), keepalive=0.1, http_client=http_client),
        deadline_seconds=0.8,
        deadline_margin_seconds=0.2,
    )
    with openai.OpenAI(base_url=f"{url}/v1", api_key=ALICE, max_retries=0) as client:
        messages = [{"role": "user", "content": "CALL:read_file {}"}]
        first = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
        call = first.choices[0].message.tool_calls[0]
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "R"},
        ]
        letta.delay = 1.5
        if stream:
            lines = [line for _, line in stream_lines(url, {"model": "coder", "messages": messages, "tools": TOOLS})]
            error = json.loads(lines[-1][6:])["error"]
        else:
            with pytest.raises(openai.APIStatusError) as info:
                client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
            assert info.value.status_code == 504
            error = info.value.body
        assert error["code"] == "deadline_exceeded"
        time.sleep(1.0)  # Letta finishes the abandoned turn on its side
        letta.delay = 0
        # Streamed: Letta had accepted the results, so the retry is answered from Letta's run without sending them
        # again. Not streamed: no answer came back, so the results stayed answerable and are sent once more.
        retry = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
        assert retry.choices[0].finish_reason == "stop"
        if stream:
            assert retry.choices[0].message.content.endswith("=R")
        approvals = letta.approvals_received(next(iter(letta.agents)))
        assert len(approvals) == (1 if stream else 2)
        after = client.chat.completions.create(model="coder", messages=[{"role": "user", "content": "SAY:next"}])
        assert after.choices[0].message.content == "next"  # the agent is not left blocked


def test_a_turn_longer_than_api_gateways_29_seconds_streams_to_the_end(
    serve: Callable[..., str], letta_url: str, letta: LettaDouble, tmp_path
) -> None:
    """Real timing, default keepalive interval: the buffered API Gateway path would have cut this off at 29 s."""
    from letta_gateway.store.sqlite import SQLiteBackend

    letta.add_agent("coder")
    url = serve(make_gateway(letta_url, SQLiteBackend(str(tmp_path / "s.db"))))
    letta.delay = 15.5  # before each of the two streamed words: ~31 s of Letta silence in all
    lines = stream_lines(url, {"model": "coder", "messages": [{"role": "user", "content": "SAY:long turn"}]})
    assert lines[-1][0] > 29.0 and lines[-1][1] == "data: [DONE]"
    keepalive_times = [t for t, line in lines if line == ": keepalive"]
    assert len(keepalive_times) >= 2
    times = [t for t, _ in lines]
    assert max(b - a for a, b in pairwise(times)) < 15.0

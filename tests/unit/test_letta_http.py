"""The hot path to Letta (a turn, a streamed turn on letta-client's own HTTP client), over both transports."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

import letta_client
import openai
import pytest

from letta_gateway.agents import LettaAgents
from letta_gateway.letta_http import _AiohttpResponse
from tests.conftest import ALICE, HTTP_CLIENTS, LETTA_KEY, make_gateway
from tests.support.letta_double import LettaDouble

TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {"type": "object", "properties": {}}}}]


class _Content:
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def iter_chunked(self, size: int) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


class _Response:
    status = 200
    headers: dict[str, str] = {}

    def __init__(self, chunks: list[bytes]) -> None:
        self.content = _Content(chunks)


async def _lines(chunks: list[bytes]) -> list[str]:
    return [line async for line in _AiohttpResponse(_Response(chunks)).lines()]


BIG = "x" * 300_000

LINES = [
    ("one event", [b"data: {}\n\n"], ["data: {}", ""]),
    ("split across chunks", [b"da", b"ta: 1\n", b"\ndata", b": 2\n\n"], ["data: 1", "", "data: 2", ""]),
    ("crlf", [b"data: 1\r\n\r\n"], ["data: 1", ""]),
    ("no final newline", [b"data: 1\n", b"data: 2"], ["data: 1", "data: 2"]),
    (
        "a line longer than any buffer",
        [b"data: ", BIG.encode()[:100_000], BIG.encode()[100_000:], b"\n"],
        [f"data: {BIG}"],
    ),
    ("utf-8 split inside a character", [b"data: \xc3", b"\xa9\n"], ["data: é"]),
]


@pytest.mark.parametrize(("case", "chunks", "expected"), LINES, ids=[c[0] for c in LINES])
def test_aiohttp_stream_lines(case: str, chunks: list[bytes], expected: list[str]) -> None:
    assert asyncio.run(_lines(chunks)) == expected


@pytest.fixture
def url_for(serve: Callable[..., str], letta_url: str, backend_factory) -> Callable[[str], str]:
    return lambda transport: serve(make_gateway(letta_url, backend_factory(), http_client=transport))


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("transport", HTTP_CLIENTS)
def test_turns_carry_the_sdks_headers(
    url_for: Callable[[str], str], letta: LettaDouble, transport: str, stream: bool
) -> None:
    letta.add_agent("coder")
    with openai.OpenAI(base_url=f"{url_for(transport)}/v1", api_key=ALICE, max_retries=0) as client:
        reply = client.chat.completions.create(
            model="coder", messages=[{"role": "user", "content": "SAY:hello there"}], stream=stream
        )
        text = "".join(c.choices[0].delta.content or "" for c in reply if c.choices) if stream else None
    assert text is None or text == "hello there"
    (request,) = letta.requests
    headers = request["headers"]
    sdk = letta_client.AsyncLetta(api_key=LETTA_KEY, base_url="http://letta.test")
    assert {k: headers.get(k.lower()) for k in ("Authorization", "User-Agent", "X-Stainless-Package-Version")} == {
        "Authorization": f"Bearer {LETTA_KEY}",
        "User-Agent": sdk.user_agent,
        "X-Stainless-Package-Version": letta_client.__version__,
    }
    assert headers["accept"] == ("text/event-stream" if stream else "application/json")
    assert request["body"]["streaming"] is stream


@pytest.mark.parametrize("transport", HTTP_CLIENTS)
def test_a_streamed_tool_call_with_arguments_larger_than_any_buffer(
    url_for: Callable[[str], str], letta: LettaDouble, transport: str
) -> None:
    letta.add_agent("coder")
    content = "y" * 400_000  # the double streams the arguments in two events of ~200 KB, one SSE line each
    with openai.OpenAI(base_url=f"{url_for(transport)}/v1", api_key=ALICE, max_retries=0) as client:
        chunks = list(
            client.chat.completions.create(
                model="coder",
                messages=[{"role": "user", "content": "CALL:write_file " + json.dumps({"content": content})}],
                tools=TOOLS,
                stream=True,
            )
        )
    arguments = "".join(
        call.function.arguments or ""
        for chunk in chunks
        if chunk.choices
        for call in chunk.choices[0].delta.tool_calls or ()
    )
    assert json.loads(arguments) == {"content": content}
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


PATHS = [
    ("agent-1", None, "/v1/agents/agent-1/messages"),
    ("agent-1", "conv-2", "/v1/conversations/conv-2/messages"),
    ("agent-1/../../runs", None, "/v1/agents/agent-1%2F..%2F..%2Fruns/messages"),
    ("agent-1", "conv-2/../../agents/agent-9", "/v1/conversations/conv-2%2F..%2F..%2Fagents%2Fagent-9/messages"),
    ("agent-1", "conv 2?x=1#y", "/v1/conversations/conv%202%3Fx%3D1%23y/messages"),
]


@pytest.mark.parametrize(("agent_id", "conversation_id", "path"), PATHS)
def test_ids_are_path_segments_not_paths(agent_id: str, conversation_id: str | None, path: str) -> None:
    assert LettaAgents._messages_path(agent_id, conversation_id) == path

"""Letta faults mid-stream and at the connection level: an OpenAI error, nothing lost, nothing sent twice."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator

import openai
import pytest

from letta_gateway.agents import AgentInfo
from letta_gateway.store.base import thread_key
from tests.conftest import ALICE, HTTP_CLIENTS, make_gateway
from tests.support import sse
from tests.support.letta_double import LettaDouble

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture(params=HTTP_CLIENTS)
def letta_http_client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def sse_payloads(url: str, body: dict) -> list[dict]:
    return sse.payloads(sse.stream_lines(url, body, ALICE, timeout=30))


@pytest.mark.parametrize(
    ("fault", "code"),
    [("malformed", "upstream_malformed"), ("truncated", "upstream_incomplete"), ("reset", "upstream_unavailable")],
)
def test_broken_streams_end_with_an_error_event(gateway_url: str, letta: LettaDouble, fault: str, code: str) -> None:
    letta.add_agent("coder")
    letta.stream_fault = fault
    payloads = sse_payloads(gateway_url, {"model": "coder", "messages": [{"role": "user", "content": "SAY:a b"}]})
    assert payloads[0]["choices"][0]["delta"]["role"] == "assistant"
    assert payloads[-1] == {
        "error": {"message": payloads[-1]["error"]["message"], "type": "api_error", "param": None, "code": code}
    }


def test_openai_sdk_raises_on_the_error_event(client: openai.OpenAI, letta: LettaDouble) -> None:
    letta.add_agent("coder")
    letta.stream_fault = "truncated"
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(
            model="coder", messages=[{"role": "user", "content": "x"}], stream=True
        ):
            pass


@pytest.fixture
def resetting_letta() -> Iterator[tuple[str, list[str]]]:
    """A 'Letta' that accepts connections and drops them without answering."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.2)
    stop = threading.Event()
    received: list[str] = []

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            received.append(conn.recv(65536).split(b"\r\n", 1)[0].decode())
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            conn.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}", received
    stop.set()
    thread.join(2)
    server.close()


def test_connection_reset_is_502_and_leaves_tool_results_answerable(
    serve: Callable[..., str],
    letta_url: str,
    resetting_letta: tuple[str, list[str]],
    backend_factory,
    letta: LettaDouble,
    letta_http_client: str,
) -> None:
    reset_url, received = resetting_letta
    agent = letta.add_agent("coder")
    backend = backend_factory()
    good = serve(make_gateway(letta_url, backend, http_client=letta_http_client))
    with openai.OpenAI(base_url=f"{good}/v1", api_key=ALICE, max_retries=0) as c:
        messages = [{"role": "user", "content": "CALL:read_file {}"}]
        first = c.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "R"},
    ]
    broken = make_gateway(reset_url, backend, http_client=letta_http_client)
    # Seed its model cache so the request gets past resolution and the reset hits the resume itself.
    broken.agents._resolved["coder"] = (float("inf"), AgentInfo(agent.id, "coder", 0))
    broken_url = serve(broken)
    with openai.OpenAI(base_url=f"{broken_url}/v1", api_key=ALICE, max_retries=0) as c:
        with pytest.raises(openai.InternalServerError) as info:
            c.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    assert info.value.status_code == 502 and info.value.body["code"] == "upstream_unavailable"
    assert received == [f"POST /v1/agents/{agent.id}/messages HTTP/1.1"]
    record = backend.get(thread_key(agent.id, None))
    assert record is not None and record.status == "pending"  # claimed for the resume, then released
    with openai.OpenAI(base_url=f"{good}/v1", api_key=ALICE, max_retries=0) as c:
        retry = c.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    assert retry.choices[0].message.content.endswith("=R")
    assert len(letta.approvals_received(agent.id)) == 1

"""Transport failures as domain errors. What matters is whether the request may have reached Letta: `NotSent` lets a
paused run's claim go back to pending, anything else is handled as 'Letta may have acted'."""

from __future__ import annotations

import aiohttp
import httpx
import letta_client
import pytest
from aiohttp.client_reqrep import ConnectionKey
from httpx_aiohttp.transport import map_aiohttp_exceptions

from letta_gateway.agents import LettaTimeout, NotSent, ResultUnknown, map_error

REQUEST = httpx.Request("POST", "http://letta.test/v1/agents/agent-1/messages")
KEY = ConnectionKey("letta.test", 80, False, True, None, None, None, None)


def from_sdk(error: Exception) -> Exception:
    """Wraps a transport error the way letta-client's request loop does."""
    wrapper = (
        letta_client.APITimeoutError(request=REQUEST)
        if isinstance(error, httpx.TimeoutException)
        else letta_client.APIConnectionError(request=REQUEST)
    )
    wrapper.__cause__ = error
    return wrapper


def through_aiohttp_transport(error: Exception) -> Exception:
    """The exception httpx-aiohttp raises for an aiohttp failure (the original chained as its cause)."""
    try:
        with map_aiohttp_exceptions():
            raise error
    except Exception as mapped:
        return mapped
    raise AssertionError("not raised")


AIOHTTP_FAILURES = [
    ("refused", aiohttp.ClientConnectorError(KEY, ConnectionRefusedError(111, "refused")), NotSent, 502),
    ("connect timeout", aiohttp.ConnectionTimeoutError("connect"), NotSent, 502),
    # httpx-aiohttp reports these two as httpx.ConnectTimeout, which alone would read as 'never sent'.
    ("server closed mid-answer", aiohttp.ServerDisconnectedError(), ResultUnknown, 502),
    ("reset", aiohttp.ClientOSError(104, "Connection reset by peer"), ResultUnknown, 502),
    ("read timeout", aiohttp.SocketTimeoutError("read"), LettaTimeout, 504),
    ("truncated body", aiohttp.ClientPayloadError("incomplete"), ResultUnknown, 502),
]

HTTPX_FAILURES = [
    ("refused", httpx.ConnectError("refused"), NotSent, 502),
    ("connect timeout", httpx.ConnectTimeout("connect"), NotSent, 502),
    ("server closed mid-answer", httpx.RemoteProtocolError("Server disconnected"), ResultUnknown, 502),
    ("reset", httpx.ReadError("Connection reset by peer"), ResultUnknown, 502),
    ("read timeout", httpx.ReadTimeout("read"), LettaTimeout, 504),
]


@pytest.mark.parametrize(
    ("case", "error", "expected", "status"), AIOHTTP_FAILURES, ids=[c[0] for c in AIOHTTP_FAILURES]
)
@pytest.mark.parametrize("where", ["request", "stream"])
def test_aiohttp_transport_failures(case: str, error: Exception, expected: type, status: int, where: str) -> None:
    mapped = through_aiohttp_transport(error)
    # A request fails inside the SDK (wrapped); a stream being read fails with the transport's own exception.
    domain = map_error(from_sdk(mapped) if where == "request" else mapped)
    assert (type(domain), domain.status_code) == (expected, status)


@pytest.mark.parametrize(("case", "error", "expected", "status"), HTTPX_FAILURES, ids=[c[0] for c in HTTPX_FAILURES])
def test_httpx_transport_failures(case: str, error: Exception, expected: type, status: int) -> None:
    domain = map_error(from_sdk(error))
    assert (type(domain), domain.status_code) == (expected, status)


MID_STREAM = [c for c in HTTPX_FAILURES if c[2] is not NotSent]


@pytest.mark.parametrize(("case", "error", "expected", "status"), MID_STREAM, ids=[c[0] for c in MID_STREAM])
def test_httpx_failures_while_reading_a_stream(case: str, error: Exception, expected: type, status: int) -> None:
    domain = map_error(error)
    assert (type(domain), domain.status_code) == (expected, status)


def test_an_unrelated_aiohttp_error_further_down_the_chain_is_not_mistaken_for_the_transport() -> None:
    outer = httpx.ReadTimeout("read")
    outer.__context__ = aiohttp.ClientConnectorError(KEY, ConnectionRefusedError(111, "refused"))
    assert type(map_error(from_sdk(outer))) is LettaTimeout

"""The connection to Letta behind `agents`: letta-client for every call, plus the two hot ones (a turn, a streamed
turn) sent straight on the HTTP client letta-client itself is configured with.

Why the hot calls skip the SDK's request machinery (options models, header merging, retry loop, response
wrappers): measured against the Letta double, one non-streamed turn costs the client ~1.3 ms CPU through
`with_raw_response.create` over aiohttp, ~0.8 ms on the httpx interface directly and ~0.35 ms on aiohttp
directly (bench/). The requests carry the SDK's own default headers (its User-Agent and X-Stainless-* headers,
which Letta requires for `streaming: true`, and the key), so Letta sees the same request either way.

Two transports, one per `LETTA_HTTP_CLIENT`: aiohttp (one ClientSession, shared with letta-client through
httpx-aiohttp) and httpx (letta-client's own httpx client, the Lambda layer's). Only `agents` uses this module.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from functools import partial
from typing import Any, Protocol


class RawResponse(Protocol):
    """An HTTP response whose body is still open (a stream)."""

    status: int
    headers: Mapping[str, str]

    def lines(self) -> AsyncIterator[str]: ...

    async def read(self) -> bytes: ...

    async def aclose(self) -> None: ...


class HotPath(Protocol):
    async def post(self, path: str, payload: bytes) -> tuple[int, Mapping[str, str], bytes]:
        """POST a JSON body, read the whole answer."""
        ...

    async def stream(self, path: str, payload: bytes) -> RawResponse:
        """POST a JSON body; the answer's status and headers are in, its body is still to be read."""
        ...


class Connection:
    """One event loop's letta-client and the hot path on the same connection pool."""

    def __init__(self, sdk: Any, hot: HotPath) -> None:
        self.sdk = sdk
        self.hot = hot

    async def aclose(self) -> None:
        await self.sdk.close()


def _sdk_headers(sdk: Any) -> dict[str, str]:
    """The headers letta-client sends with every request (its `default_headers`, minus the ones it omits)."""
    return {k: v for k, v in sdk.default_headers.items() if isinstance(v, str)}


# ---------------------------------------------------------------------------------------------------- httpx


class _HttpxResponse:
    def __init__(self, response: Any) -> None:
        self._response = response
        self.status = int(response.status_code)
        self.headers = response.headers

    def lines(self) -> AsyncIterator[str]:
        return self._response.aiter_lines()  # type: ignore[no-any-return]

    async def read(self) -> bytes:
        return await self._response.aread()  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpxHotPath:
    def __init__(self, http: Any, base_url: str, headers: Mapping[str, str]) -> None:
        self._http = http
        self._base_url = base_url
        self._headers = dict(headers)
        self._stream_headers = {**self._headers, "Accept": "text/event-stream"}

    async def post(self, path: str, payload: bytes) -> tuple[int, Mapping[str, str], bytes]:
        response = await self._http.post(self._base_url + path, content=payload, headers=self._headers)
        return int(response.status_code), response.headers, response.content

    async def stream(self, path: str, payload: bytes) -> RawResponse:
        request = self._http.build_request("POST", self._base_url + path, content=payload, headers=self._stream_headers)
        return _HttpxResponse(await self._http.send(request, stream=True))


# -------------------------------------------------------------------------------------------------- aiohttp


class _AiohttpResponse:
    CHUNK = 64 * 1024

    def __init__(self, response: Any) -> None:
        self._response = response
        self.status = int(response.status)
        self.headers = response.headers

    async def lines(self) -> AsyncIterator[str]:
        # Split by hand: aiohttp's own line reader refuses lines longer than its buffer, and an SSE event (a tool
        # call's arguments) can be longer than that.
        pending = bytearray()
        async for chunk in self._response.content.iter_chunked(self.CHUNK):
            pending += chunk
            if b"\n" not in chunk:
                continue
            *complete, rest = pending.split(b"\n")
            pending = bytearray(rest)
            for line in complete:
                yield line.rstrip(b"\r").decode("utf-8", errors="replace")
        if pending:
            yield pending.rstrip(b"\r").decode("utf-8", errors="replace")

    async def read(self) -> bytes:
        return await self._response.read()  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        if self._response.content.at_eof():
            self._response.release()  # back to the pool
        else:
            self._response.close()  # unread data: drop the connection


class AiohttpHotPath:
    def __init__(self, session: Any, base_url: str, headers: Mapping[str, str]) -> None:
        self._session = session
        self._base_url = base_url
        self._headers = dict(headers)
        self._stream_headers = {**self._headers, "Accept": "text/event-stream"}

    async def post(self, path: str, payload: bytes) -> tuple[int, Mapping[str, str], bytes]:
        async with self._session.post(self._base_url + path, data=payload, headers=self._headers) as response:
            return int(response.status), response.headers, await response.read()

    async def stream(self, path: str, payload: bytes) -> RawResponse:
        response = await self._session.post(self._base_url + path, data=payload, headers=self._stream_headers)
        return _AiohttpResponse(response)


# -------------------------------------------------------------------------------------------------- factory


def connect(
    *, base_url: str, api_key: str, transport: str, timeout_seconds: float, connect_seconds: float = 10.0
) -> Connection:
    """letta-client and the hot path for the running event loop (an aiohttp session binds to its loop)."""
    import httpx
    import letta_client

    timeout = httpx.Timeout(timeout_seconds, connect=connect_seconds)
    # Idle connections are dropped well before a server's keep-alive timeout (uvicorn: 5 s), so a request is never
    # written to a connection the server is closing: such a failure would be ambiguous for a write.
    keepalive = 2.0
    root = base_url.rstrip("/")
    hot: Callable[[Mapping[str, str]], HotPath]
    if transport == "aiohttp":
        import aiohttp
        from httpx_aiohttp import AiohttpTransport

        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=1000, keepalive_timeout=keepalive, ssl=httpx.create_ssl_context(trust_env=True)
            ),
            timeout=aiohttp.ClientTimeout(
                total=None, connect=timeout_seconds, sock_connect=connect_seconds, sock_read=timeout_seconds
            ),
        )
        http: Any = letta_client.DefaultAioHttpClient(timeout=timeout, transport=AiohttpTransport(client=session))
        hot = partial(AiohttpHotPath, session, root)
    else:
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100, keepalive_expiry=keepalive)
        http = letta_client.DefaultAsyncHttpxClient(timeout=timeout, limits=limits)
        hot = partial(HttpxHotPath, http, root)
    sdk = letta_client.AsyncLetta(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout, http_client=http)
    return Connection(sdk, hot(_sdk_headers(sdk)))

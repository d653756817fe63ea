"""The only module that talks to Letta: letta-client for every call, except that a turn (streamed or not) goes
straight onto letta-client's own HTTP client (see letta_http).

Responses are read as raw JSON (the shapes in the Letta API reference) rather than SDK models: the pure translation
works on plain dicts, and no per-message model objects are built. Errors become domain errors here. Connections are
created lazily, one per event loop (Mangum may run invocations on different loops).
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from . import observability as log
from .errors import (
    Conflict,
    GatewayError,
    InvalidRequest,
    ModelNotFound,
    NotFound,
    RateLimited,
    UpstreamError,
)
from .letta_http import Connection, RawResponse, connect
from .settings import Settings


@dataclass(frozen=True)
class AgentInfo:
    id: str
    name: str
    created: int


class AgentPendingApproval(Conflict):
    """Letta refused a new message because the agent waits for tool results."""

    code = "agent_pending_approval"


class LettaNotFound(NotFound):
    pass


class ResultUnknown(UpstreamError):
    """The request may have reached Letta (timeout or connection lost after sending)."""


class LettaTimeout(ResultUnknown):
    status_code = 504
    code = "upstream_timeout"


class NotSent(UpstreamError):
    """The request never reached Letta (connection refused, connect timeout)."""

    code = "upstream_unavailable"


def _detail(body: object) -> tuple[str, dict[str, Any]]:
    detail = body.get("detail") if isinstance(body, dict) else body
    if isinstance(detail, dict):
        return str(detail.get("message") or detail), detail
    if isinstance(detail, list):
        return "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail), {}
    return (str(detail) if detail is not None else ""), {}


def status_error(status: int, body: object, retry_after: str | None) -> GatewayError:
    """A Letta error response (status >= 400) as a domain error."""
    message, detail = _detail(body)
    message = message[:500]
    if status == 409:
        if detail.get("code") == "PENDING_APPROVAL" or "waiting for approval" in message:
            return AgentPendingApproval(
                "The agent is waiting for the results of tool calls it made earlier. Send those results as "
                "role 'tool' messages after the assistant message that holds the tool calls."
            )
        return Conflict(
            f"The Letta agent is busy: {message}", code="agent_busy", headers={"Retry-After": retry_after or "2"}
        )
    if status == 404:
        return LettaNotFound(message or "Not found in Letta.")
    if status == 429:
        return RateLimited("Letta is rate limiting requests; retry later.", headers={"Retry-After": retry_after or "5"})
    if status in (401, 403):
        return UpstreamError("Letta rejected the gateway's credentials (check LETTA_API_KEY).", code="upstream_auth")
    if 400 <= status < 500:
        return InvalidRequest(f"Letta rejected the request: {message}", code="letta_rejected")
    return UpstreamError(f"Letta failed with HTTP {status}.")


def _aiohttp_cause(error: BaseException) -> BaseException | None:
    """The aiohttp exception in `error`'s chain of causes, if any."""
    cause: BaseException | None = error
    for _ in range(8):  # chains are short; the bound only guards against a cyclic one
        if cause is None or type(cause).__module__.startswith("aiohttp."):
            return cause
        cause = cause.__cause__
    return None


def _aiohttp_failure(error: BaseException) -> GatewayError | None:
    """Classifies a failure of the aiohttp transport by aiohttp's own exception, which the transport chains under
    a coarser httpx one (it reports a server that closed the connection mid-answer as a connect timeout)."""
    cause = _aiohttp_cause(error)
    if cause is None:
        return None
    import aiohttp

    if isinstance(cause, (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)):
        return NotSent("Could not connect to Letta.")
    if isinstance(cause, asyncio.TimeoutError):
        return LettaTimeout("Letta did not answer in time.")
    return ResultUnknown("The connection to Letta was lost.", code="upstream_unavailable")


def map_error(error: BaseException) -> GatewayError:
    """A letta-client, httpx or aiohttp exception as a domain error."""
    import httpx
    import letta_client

    if isinstance(error, GatewayError):
        return error
    if isinstance(error, letta_client.APIStatusError):
        return status_error(error.status_code, error.body, error.response.headers.get("retry-after"))
    transport = _aiohttp_failure(error)
    if transport is not None:
        return transport
    if isinstance(error, letta_client.APIConnectionError):
        cause = error.__cause__
        if isinstance(cause, (httpx.ConnectError, httpx.ConnectTimeout)):
            return NotSent("Could not connect to Letta.")
        if isinstance(error, letta_client.APITimeoutError):
            return LettaTimeout("Letta did not answer in time.")
        return ResultUnknown("The connection to Letta failed.", code="upstream_unavailable")
    if isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout)):
        return NotSent("Could not connect to Letta.")
    if isinstance(error, httpx.TimeoutException):
        return LettaTimeout("Letta stopped sending in time.")
    if isinstance(error, httpx.HTTPError):
        return ResultUnknown("The connection to Letta was lost.", code="upstream_unavailable")
    return UpstreamError("Unexpected failure talking to Letta.")


class LettaStream:
    """An open Letta SSE stream: events as dicts, `[DONE]` ends it."""

    def __init__(self, response: RawResponse) -> None:
        self._response = response

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        try:
            async for line in self._response.lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                try:
                    event = json.loads(data)
                except ValueError:
                    raise UpstreamError("Letta sent a malformed stream event.", code="upstream_malformed") from None
                if isinstance(event, dict):
                    yield event
        except GatewayError:
            raise
        except Exception as error:
            raise map_error(error) from None
        raise ResultUnknown("Letta's stream ended before it was complete.", code="upstream_incomplete")

    async def aclose(self) -> None:
        await self._response.aclose()


def _json_or_text(content: bytes) -> object:
    try:
        return json.loads(content)
    except ValueError:
        return content.decode("utf-8", errors="replace")


def _epoch(value: object) -> int:
    if isinstance(value, str):
        try:
            return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp())
        except ValueError:
            return 0
    return 0


def _agent(data: dict[str, Any]) -> AgentInfo:
    return AgentInfo(id=data["id"], name=data.get("name") or data["id"], created=_epoch(data.get("created_at")))


class LettaAgents:
    def __init__(self, settings: Settings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._connections: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Connection] = (
            weakref.WeakKeyDictionary()
        )
        self._api_key: str | None = settings.letta_api_key
        self._clock = clock
        self._directory: tuple[float, list[AgentInfo]] | None = None
        self._resolved: dict[str, tuple[float, AgentInfo]] = {}
        self._inflight: dict[str, asyncio.Task[AgentInfo]] = {}
        self._conversations: dict[str, str] = {}

    def set_api_key(self, api_key: str | None) -> None:
        if api_key != self._api_key:
            self._api_key = api_key
            self._connections = weakref.WeakKeyDictionary()

    @property
    def connection(self) -> Connection:
        loop = asyncio.get_running_loop()
        connection = self._connections.get(loop)
        if connection is None:
            connection = self._connections[loop] = connect(
                base_url=self.settings.letta_base_url,
                api_key=self._api_key or "local-letta-server",
                transport=self.settings.letta_http_client,
                timeout_seconds=self.settings.letta_timeout_seconds,
            )
        return connection

    @property
    def client(self) -> Any:
        """letta-client's AsyncLetta for this event loop."""
        return self.connection.sdk

    async def aclose(self) -> None:
        """Closes this event loop's Letta connections (the other loops' close with their loop)."""
        connection = self._connections.pop(asyncio.get_running_loop(), None)
        if connection is not None:
            await connection.aclose()

    def _reader(self) -> Any:
        """Reads are safe to retry."""
        return self.client.with_options(max_retries=2)

    # ------------------------------------------------------------------------------------------ directory

    async def list_agents(self) -> list[AgentInfo]:
        now = self._clock()
        if self._directory is not None and self._directory[0] > now:
            return self._directory[1]
        agents: list[AgentInfo] = []
        after: str | None = None
        try:
            while True:
                params: dict[str, Any] = {"limit": 100}
                if after:
                    params["after"] = after
                raw = await self._reader().agents.with_raw_response.list(**params)
                page = await raw.json()
                items = page if isinstance(page, list) else page.get("items") or page.get("data") or []
                agents.extend(_agent(a) for a in items)
                if len(items) < 100:
                    break
                after = items[-1]["id"]
        except GatewayError:
            raise
        except Exception as error:
            raise map_error(error) from None
        self._directory = (now + self.settings.model_cache_seconds, agents)
        return agents

    async def resolve(self, model: str) -> AgentInfo:
        """An agent by id or by unique name, cached briefly. Concurrent misses for one model share one lookup (a
        fresh instance under load, or each expiry, would otherwise send Letta one lookup per waiting request)."""
        now = self._clock()
        hit = self._resolved.get(model)
        if hit is not None and hit[0] > now:
            return hit[1]
        loop = asyncio.get_running_loop()
        task = self._inflight.get(model)
        if task is None or task.get_loop() is not loop:
            task = self._inflight[model] = loop.create_task(self._lookup(model))
            task.add_done_callback(lambda done: self._settled(model, done))
        agent = await asyncio.shield(task)
        if len(self._resolved) > 4096:
            self._resolved.clear()
        self._resolved[model] = (now + self.settings.model_cache_seconds, agent)
        return agent

    def _settled(self, model: str, task: asyncio.Task[AgentInfo]) -> None:
        if self._inflight.get(model) is task:
            del self._inflight[model]
        if not task.cancelled():
            task.exception()  # observed: a waiter that was cancelled must not leave it unretrieved

    def forget(self, model: str) -> None:
        """Drop cached resolutions after Letta reported the agent missing."""
        self._resolved.pop(model, None)
        self._directory = None

    async def _lookup(self, model: str) -> AgentInfo:
        try:
            if model.startswith("agent-"):
                try:
                    raw = await self._reader().agents.with_raw_response.retrieve(model)
                    return _agent(await raw.json())
                except Exception as error:
                    mapped = map_error(error)
                    if not isinstance(mapped, (LettaNotFound, InvalidRequest)):
                        raise mapped from None
            raw = await self._reader().agents.with_raw_response.list(name=model, limit=2)
            page = await raw.json()
            items = page if isinstance(page, list) else page.get("items") or []
        except GatewayError:
            raise
        except Exception as error:
            raise map_error(error) from None
        matches = [a for a in items if a.get("name") == model]
        if not matches:
            raise ModelNotFound(model)
        if len(matches) > 1:
            raise InvalidRequest(
                f"Several Letta agents are named '{model}'; use the agent id as the model instead.",
                param="model",
                code="model_ambiguous",
            )
        return _agent(matches[0])

    # ------------------------------------------------------------------------------------------ conversations

    async def create_conversation(self, agent_id: str, summary: str) -> str:
        try:
            raw = await self.client.conversations.with_raw_response.create(agent_id=agent_id, summary=summary)
            return str((await raw.json())["id"])
        except GatewayError:
            raise
        except Exception as error:
            raise map_error(error) from None

    async def write_block(self, agent_id: str, label: str, value: str, limit: int, description: str) -> None:
        """Set the agent's memory block `label` to `value`, creating and attaching it the first time."""
        try:
            try:
                await self.client.agents.blocks.with_raw_response.update(
                    label, agent_id=agent_id, value=value, limit=limit
                )
                return
            except Exception as error:
                if not isinstance(map_error(error), (LettaNotFound, InvalidRequest)):
                    raise
            raw = await self.client.blocks.with_raw_response.create(
                label=label, value=value, limit=limit, description=description
            )
            block_id = (await raw.json())["id"]
            await self.client.agents.blocks.with_raw_response.attach(block_id, agent_id=agent_id)
        except GatewayError:
            raise
        except Exception as error:
            raise map_error(error) from None

    async def delete_conversation(self, conversation_id: str) -> None:
        try:
            await self.client.with_options(max_retries=2).conversations.with_raw_response.delete(conversation_id)
        except Exception as error:
            raise map_error(error) from None

    async def conversation_agent(self, conversation_id: str) -> str | None:
        """The agent a conversation belongs to (None when it does not exist), cached."""
        hit = self._conversations.get(conversation_id)
        if hit is not None:
            return hit
        try:
            raw = await self._reader().conversations.with_raw_response.retrieve(conversation_id)
            agent_id = (await raw.json()).get("agent_id")
        except Exception as error:
            mapped = map_error(error)
            if isinstance(mapped, (LettaNotFound, InvalidRequest)):
                return None
            raise mapped from None
        if agent_id:
            if len(self._conversations) > 10_000:
                self._conversations.clear()
            self._conversations[conversation_id] = str(agent_id)
        return str(agent_id) if agent_id else None

    async def pending_tool_call_ids(self, agent_id: str, conversation_id: str | None = None) -> list[str]:
        """The tool calls the agent's default thread waits on, as Letta reports them (`agent.pending_approval`).
        Letta does not report a conversation's pending approval the same way: none are known for those."""
        if conversation_id is not None:
            return []
        try:
            raw = await self._reader().agents.with_raw_response.retrieve(agent_id, include=["agent.pending_approval"])
            agent = await raw.json()
        except GatewayError:
            raise
        except Exception as error:
            raise map_error(error) from None
        pending = agent.get("pending_approval") or {}
        calls = pending.get("tool_calls") or ([pending["tool_call"]] if pending.get("tool_call") else [])
        return [c["tool_call_id"] for c in calls if c.get("tool_call_id")]

    # ------------------------------------------------------------------------------------------ runs

    async def run_response(self, run_id: str) -> dict[str, Any]:
        """A finished run as a `LettaResponse`-shaped dict (its messages and stop reason), read back from Letta."""
        try:
            run = await (await self._reader().runs.with_raw_response.retrieve(run_id)).json()
            raw = await self._reader().runs.messages.with_raw_response.list(run_id, order="asc", limit=1000)
            page = await raw.json()
        except GatewayError:
            raise
        except Exception as error:
            raise map_error(error) from None
        messages = page if isinstance(page, list) else page.get("items") or []
        return {
            "messages": messages,
            "stop_reason": {"message_type": "stop_reason", "stop_reason": run.get("stop_reason")},
            "usage": None,
        }

    async def find_answering_run(
        self,
        agent_id: str,
        tool_call_ids: Sequence[str],
        conversation_id: str | None = None,
        recent: int = 20,
        finished: bool = False,
    ) -> str | None:
        """The thread's recent run whose input answered exactly these tool calls, if any (with `finished`, only if
        that run has completed)."""
        wanted = set(tool_call_ids)
        scope: dict[str, Any] = {"conversation_id": conversation_id} if conversation_id else {"agent_id": agent_id}
        try:
            raw = await self._reader().runs.with_raw_response.list(**scope, limit=recent, order="desc")
            page = await raw.json()
            runs = page if isinstance(page, list) else page.get("items") or []
            for run in runs:
                if finished and run.get("status") != "completed":  # still answering, or failed: nothing to replay
                    continue
                raw = await self._reader().runs.messages.with_raw_response.list(run["id"], order="asc", limit=50)
                listed = await raw.json()
                messages = listed if isinstance(listed, list) else listed.get("items") or []
                for message in messages:
                    answered = {
                        r.get("tool_call_id")
                        for r in (message.get("approvals") or message.get("tool_returns") or [])
                        if isinstance(r, dict)
                    }
                    if message.get("message_type") in ("approval_response_message", "tool_return_message") and (
                        answered == wanted
                    ):
                        return str(run["id"])
        except GatewayError:
            raise
        except Exception as error:
            raise map_error(error) from None
        return None

    # ------------------------------------------------------------------------------------------ messages

    @staticmethod
    def _payload(messages: Sequence[dict[str, Any]], client_tools: Sequence[dict[str, Any]], **flags: bool) -> bytes:
        """The body of a turn, already in Letta's wire shape."""
        body: dict[str, Any] = {"messages": list(messages)}
        if client_tools:
            body["client_tools"] = list(client_tools)
        body.update(flags)
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()

    @staticmethod
    def _messages_path(agent_id: str, conversation_id: str | None) -> str:
        if conversation_id is None:
            return f"/v1/agents/{quote(agent_id, safe='')}/messages"
        return f"/v1/conversations/{quote(conversation_id, safe='')}/messages"

    async def send(
        self,
        agent_id: str,
        messages: Sequence[dict[str, Any]],
        client_tools: Sequence[dict[str, Any]],
        conversation_id: str | None = None,
    ) -> dict[str, Any]:
        """One non-streamed turn (`POST /v1/agents/{id}/messages`, or the conversation's). Never retried: Letta is
        not idempotent."""
        started = time.perf_counter()
        payload = self._payload(messages, client_tools, streaming=False)
        try:
            status, headers, content = await self.connection.hot.post(
                self._messages_path(agent_id, conversation_id), payload
            )
        except Exception as error:
            raise map_error(error) from None
        if status >= 400:
            raise status_error(status, _json_or_text(content), headers.get("retry-after"))
        try:
            data = json.loads(content)
        except ValueError:
            raise ResultUnknown("Letta sent a malformed response.", code="upstream_malformed") from None
        log.metric("LettaLatency", (time.perf_counter() - started) * 1000, "Milliseconds")
        if not isinstance(data, dict):
            raise ResultUnknown("Letta sent a malformed response.", code="upstream_malformed")
        return data

    async def open_stream(
        self,
        agent_id: str,
        messages: Sequence[dict[str, Any]],
        client_tools: Sequence[dict[str, Any]],
        conversation_id: str | None = None,
    ) -> LettaStream:
        """Start a token-streamed turn with keepalive pings; HTTP-level failures raise here, before any event."""
        payload = self._payload(messages, client_tools, streaming=True, stream_tokens=True, include_pings=True)
        started = time.perf_counter()
        try:
            response = await self.connection.hot.stream(self._messages_path(agent_id, conversation_id), payload)
        except Exception as error:
            raise map_error(error) from None
        if response.status >= 400:
            try:
                content = await response.read()
            except Exception:
                content = b""
            finally:
                await response.aclose()
            raise status_error(response.status, _json_or_text(content), response.headers.get("retry-after"))
        log.metric("LettaTimeToStream", (time.perf_counter() - started) * 1000, "Milliseconds")
        return LettaStream(response)

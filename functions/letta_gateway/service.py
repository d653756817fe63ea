"""The gateway's use cases: models, and chat turns that pause on client tool calls and resume from durable state.

Composes the pure translation, the Letta agents client and the pending-approval store; knows nothing of HTTP.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

from . import observability as log
from . import sse
from .agents import AgentInfo, AgentPendingApproval, LettaAgents, LettaNotFound, LettaStream
from .auth import KeyRing, Principal
from .credentials import CredentialSource
from .errors import GatewayError, ModelNotFound, UpstreamError
from .store import PendingApprovals, PendingRecord, ToolCallEntry
from .translate import (
    KEEPALIVE,
    Pause,
    StreamTranslator,
    check_supported,
    client_tools,
    completion_from_letta,
    letta_messages,
    plan_turn,
    tool_names,
)
from .wire import ChatCompletion, ChatCompletionRequest, Model, ModelList


def completion_id() -> str:
    return "chatcmpl-" + secrets.token_hex(12)


class Gateway:
    def __init__(
        self,
        agents: LettaAgents,
        approvals: PendingApprovals,
        credentials: CredentialSource,
        keyring: KeyRing | None = None,
    ) -> None:
        self.agents = agents
        self.approvals = approvals
        self.credentials = credentials
        self.keyring = keyring or KeyRing()
        self._credentials_seen: object = None

    # ------------------------------------------------------------------------------------------------ auth

    async def authenticate(self, authorization: str | None) -> Principal:
        credentials = await self.credentials.get()
        if credentials is not self._credentials_seen:
            self.keyring.replace(credentials.gateway_api_keys)
            self.agents.set_api_key(credentials.letta_api_key)
            self._credentials_seen = credentials
        principal = self.keyring.authenticate(authorization)
        log.bind(key_id=principal.key_id)
        return principal

    # ---------------------------------------------------------------------------------------------- models

    async def list_models(self, principal: Principal) -> ModelList:
        agents = await self.agents.list_agents()
        counts: dict[str, int] = {}
        for agent in agents:
            counts[agent.name] = counts.get(agent.name, 0) + 1
        return ModelList(data=[self._model(a, counts) for a in agents])

    async def get_model(self, principal: Principal, model: str) -> Model:
        agent = await self._resolve(model)
        agents = await self.agents.list_agents()
        counts = {agent.name: sum(1 for a in agents if a.name == agent.name)}
        return self._model(agent, counts)

    @staticmethod
    def _model(agent: AgentInfo, name_counts: dict[str, int]) -> Model:
        model_id = agent.name if name_counts.get(agent.name, 0) <= 1 else agent.id
        return Model(id=model_id, created=agent.created, owned_by="letta")

    async def _resolve(self, model: str) -> AgentInfo:
        agent = await self.agents.resolve(model)
        log.bind(agent_id=agent.id)
        return agent

    # ------------------------------------------------------------------------------------------------ chat

    async def _prepare(
        self, principal: Principal, request: ChatCompletionRequest
    ) -> tuple[AgentInfo, list[dict[str, Any]], list[dict[str, Any]], PendingRecord | None]:
        check_supported(request)
        turn = plan_turn(request.messages)
        tools = client_tools(request)
        agent = await self._resolve(request.model)
        claim: PendingRecord | None = None
        order: list[str] | None = None
        if turn.is_resume:
            claim = await asyncio.to_thread(
                self.approvals.claim,
                owner=principal.key_id,
                agent_id=agent.id,
                conversation_id=None,
                tool_call_ids=[r.tool_call_id for r in turn.tool_results],
            )
            order = [c.id for c in claim.tool_calls]
            log.bind(resume_of=claim.run_id)
        return agent, letta_messages(turn, order), tools, claim

    async def _explain(self, error: GatewayError, principal: Principal, agent: AgentInfo, model: str) -> GatewayError:
        """Make Letta's refusals actionable for an OpenAI client."""
        if isinstance(error, LettaNotFound):
            self.agents.forget(model)
            return ModelNotFound(model)
        if isinstance(error, AgentPendingApproval):
            record = await asyncio.to_thread(self.approvals.current, principal.key_id, agent.id, None)
            if record is not None and record.status == "pending":
                calls = ", ".join(f"{c.id} ({c.name})" for c in record.tool_calls)
                return AgentPendingApproval(
                    f"The agent is waiting for the results of its tool calls {calls}. Send them as role 'tool' "
                    "messages after the assistant message holding those tool calls, then continue."
                )
            return AgentPendingApproval(
                "The agent is waiting for approval of a tool call that was not made through this gateway key. "
                "Answer or deny it in Letta, then retry."
            )
        return error

    async def _save_pause(self, principal: Principal, agent: AgentInfo, pause: Pause) -> None:
        await asyncio.to_thread(
            self.approvals.save_pause,
            owner=principal.key_id,
            agent_id=agent.id,
            conversation_id=None,
            run_id=pause.run_id,
            approval_message_id=pause.approval_message_id,
            tool_calls=[ToolCallEntry(c.id, c.name) for c in pause.calls],
        )
        log.info("agent paused for client tools", run_id=pause.run_id, tool_calls=[c.id for c in pause.calls])

    async def complete(self, principal: Principal, request: ChatCompletionRequest) -> ChatCompletion:
        agent, messages, tools, claim = await self._prepare(principal, request)
        try:
            response = await self.agents.send(agent.id, messages, tools)
        except GatewayError as error:
            if claim is not None:
                await asyncio.to_thread(self.approvals.release, claim)
            raise await self._explain(error, principal, agent, request.model) from None
        if claim is not None:
            await asyncio.to_thread(self.approvals.complete, claim, _first_run_id(response))
        completion, pause = completion_from_letta(
            response,
            completion_id=completion_id(),
            created=int(time.time()),
            model=request.model,
            tool_names=tool_names(tools),
        )
        if pause is not None:
            await self._save_pause(principal, agent, pause)
        return completion

    async def open_stream(self, principal: Principal, request: ChatCompletionRequest) -> AsyncIterator[bytes]:
        """Start the turn; failures before Letta streams anything raise here and get a proper HTTP status."""
        agent, messages, tools, claim = await self._prepare(principal, request)
        try:
            stream = await self.agents.open_stream(agent.id, messages, tools)
        except GatewayError as error:
            if claim is not None:
                await asyncio.to_thread(self.approvals.release, claim)
            raise await self._explain(error, principal, agent, request.model) from None
        translator = StreamTranslator(
            completion_id=completion_id(),
            created=int(time.time()),
            model=request.model,
            tool_names=tool_names(tools),
            include_usage=bool(request.stream_options and request.stream_options.include_usage),
        )
        return self._relay(principal, agent, stream, translator, claim)

    async def _relay(
        self,
        principal: Principal,
        agent: AgentInfo,
        stream: LettaStream,
        translator: StreamTranslator,
        claim: PendingRecord | None,
    ) -> AsyncIterator[bytes]:
        accepted = claim is None
        try:
            yield sse.event(translator.opening())
            async for event in stream.events():
                if not accepted and claim is not None:
                    await asyncio.to_thread(self.approvals.complete, claim, event.get("run_id"))
                    accepted = True
                for item in translator.feed(event):
                    yield sse.KEEPALIVE if item is KEEPALIVE else sse.event(item)  # type: ignore[arg-type]
            reason, pause = translator.outcome()
            if pause is not None:
                await self._save_pause(principal, agent, pause)
            for chunk in translator.closing(reason):
                yield sse.event(chunk)
            yield sse.DONE
        except GatewayError as error:
            if not accepted and claim is not None:
                await asyncio.to_thread(self.approvals.release, claim)
            log.warning("stream failed", error_code=error.code, status=error.status_code)
            yield sse.event(error.envelope())
        except Exception:
            log.error("stream failed unexpectedly", exc_info=True)
            yield sse.event(UpstreamError("The gateway failed while streaming.", code="internal_error").envelope())
        finally:
            await stream.aclose()


def _first_run_id(response: dict[str, Any]) -> str | None:
    for message in response.get("messages") or ():
        if message.get("run_id"):
            return message["run_id"]
    return None

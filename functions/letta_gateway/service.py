"""The gateway's use cases: models, and chat turns that pause on client tool calls and resume from durable state.

Composes the pure translation, the Letta agents client and the pending-approval store; knows nothing of HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from . import observability as log
from . import sse
from .agents import AgentInfo, AgentPendingApproval, LettaAgents, LettaNotFound, LettaStream
from .auth import KeyRing, Principal, bearer_token
from .credentials import CredentialSource
from .errors import (
    AuthenticationFailed,
    GatewayError,
    ModelNotFound,
    NotFound,
    RateLimited,
    UpstreamError,
    UpstreamTimeout,
)
from .settings import Settings
from .store import (
    AlreadyAnswered,
    PendingApprovals,
    PendingRecord,
    ResumeInProgress,
    ResumeUnconfirmed,
    StaleResume,
    ToolCallEntry,
    ToolResultsAlreadySubmitted,
)
from .store.idempotency import Answered, Idempotency, Started
from .store.keys import KeyStore, ManagedKey
from .translate import (
    DEFAULT_SIDE_REQUEST_PATTERNS,
    KEEPALIVE,
    Pause,
    StreamTranslator,
    check_supported,
    chunks_from_completion,
    client_tools,
    completion_from_letta,
    deny_message,
    is_side_request,
    letta_messages,
    plan_turn,
    system_prompt,
    tool_names,
    transcript,
    usage_from_letta,
)
from .wire import ChatCompletion, ChatCompletionRequest, CompletionUsage, Model, ModelList

T = TypeVar("T")

SYSTEM_PROMPT_BLOCK = "client_system_prompt"

ABANDONED_REASON = (
    "The user did not run this tool and sent a new message instead. Do not wait for its result; continue with "
    "the user's new message."
)


@dataclass(frozen=True)
class ThreadRequest:
    """Which thread of the agent a request is for (from request headers)."""

    conversation_id: str | None = None
    chat_key: str | None = None
    mode: str | None = None  # "agent" | "auto"; None: the deployment's default


def request_fingerprint(model: str, user_messages: Any, tools: Any) -> str:
    """What makes two requests under one Idempotency-Key the same request."""
    return hashlib.sha256(json.dumps([model, user_messages, tools], sort_keys=True).encode()).hexdigest()


def completion_id() -> str:
    # Unique, not secret: the process's PRNG (seeded from the OS at start and after fork), no syscall per request.
    return f"chatcmpl-{random.getrandbits(96):024x}"


class DeadlineExceeded(UpstreamTimeout):
    code = "deadline_exceeded"

    def __init__(self) -> None:
        super().__init__(
            "The agent's turn did not finish within the time this deployment allows for one request. "
            "Use stream: true for long turns, or ask the agent for smaller steps."
        )


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


async def _within(deadline: float | None, awaitable: Awaitable[T]) -> T:
    remaining = _remaining(deadline)
    if remaining is None:
        return await awaitable
    try:
        return await asyncio.wait_for(awaitable, max(remaining, 0.0))
    except TimeoutError:
        raise DeadlineExceeded() from None


async def paced(
    events: AsyncIterator[dict[str, Any]], keepalive: float, deadline: float | None
) -> AsyncIterator[dict[str, Any] | None]:
    """Letta's events, with `None` whenever `keepalive` seconds pass without one; DeadlineExceeded at the deadline."""
    iterator = events.__aiter__()
    next_event: asyncio.Future[dict[str, Any]] = asyncio.ensure_future(iterator.__anext__())
    try:
        while True:
            remaining = _remaining(deadline)
            if remaining is not None and remaining <= 0:
                raise DeadlineExceeded()
            wait = keepalive if remaining is None else min(keepalive, remaining)
            done, _ = await asyncio.wait({next_event}, timeout=wait)
            if not done:
                if remaining is not None and remaining <= keepalive:
                    raise DeadlineExceeded()
                yield None
                continue
            try:
                event = next_event.result()
            except StopAsyncIteration:
                return
            yield event
            next_event = asyncio.ensure_future(iterator.__anext__())
    finally:
        if not next_event.done():
            next_event.cancel()
            with contextlib.suppress(BaseException):
                await next_event


@dataclass(frozen=True)
class Options:
    """How the gateway behaves; read from the settings once (`Options.from_settings`)."""

    keepalive_seconds: float = 10.0
    deny_unknown_approvals: bool = False
    key_cache_seconds: float = 30.0
    record_usage: bool = True
    completion_tool: str | None = "attempt_completion"
    side_request_patterns: tuple[str, ...] = DEFAULT_SIDE_REQUEST_PATTERNS
    reasoning_alias: bool = False
    # None: the client's system prompt is ignored; else kept (up to this many characters) in a memory block.
    system_prompt_block: int | None = None
    thread_mode: str = "agent"

    @classmethod
    def from_settings(cls, settings: Settings) -> Options:
        return cls(
            keepalive_seconds=settings.keepalive_seconds,
            deny_unknown_approvals=settings.deny_unknown_approvals,
            key_cache_seconds=settings.key_cache_seconds,
            record_usage=settings.record_usage,
            completion_tool=settings.completion_tool,
            side_request_patterns=(
                settings.side_request_patterns
                if settings.side_request_patterns is not None
                else DEFAULT_SIDE_REQUEST_PATTERNS
            ),
            reasoning_alias=settings.reasoning_alias,
            system_prompt_block=settings.system_prompt_block,
            thread_mode=settings.thread_mode,
        )


class Gateway:
    def __init__(
        self,
        agents: LettaAgents,
        approvals: PendingApprovals,
        credentials: CredentialSource,
        keyring: KeyRing | None = None,
        *,
        options: Options | None = None,
        idempotency: Idempotency | None = None,
    ) -> None:
        self.agents = agents
        self.approvals = approvals
        self.credentials = credentials
        self.keyring = keyring or KeyRing()
        self.idempotency = idempotency or Idempotency(approvals.backend, ttl_seconds=approvals.ttl_seconds)
        self.options = options or Options()
        self.keys: KeyStore | None = None
        self._key_cache: dict[str, tuple[float, ManagedKey | None]] = {}
        self._system_prompt_seen: dict[str, str] = {}
        self._credentials_seen: object = None

    @property
    def options(self) -> Options:
        return self._options

    @options.setter
    def options(self, options: Options) -> None:
        self._options = options
        self._side_request_patterns = [re.compile(p, re.MULTILINE) for p in options.side_request_patterns]

    def _completion_tool(self, tools: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The request's completion tool: clients such as Roo Code need a tool call in every turn."""
        if not self.options.completion_tool:
            return None
        return next((t for t in tools if t["name"] == self.options.completion_tool), None)

    # ------------------------------------------------------------------------------------------------ auth

    async def authenticate(self, authorization: str | None) -> Principal:
        credentials = await self.credentials.get()
        if credentials is not self._credentials_seen:
            self.keyring.replace(credentials.gateway_api_keys)
            self.agents.set_api_key(credentials.letta_api_key)
            self.keys = (
                KeyStore(self.approvals.backend, credentials.key_secret.encode()) if credentials.key_secret else None
            )
            self._key_cache.clear()
            self._credentials_seen = credentials
        token = bearer_token(authorization)
        principal = self.keyring.authenticate(token) or await self._managed(token)
        log.bind(key_id=principal.key_id)
        return principal

    async def _managed(self, token: str) -> Principal:
        """A managed key, cached for `key_cache_seconds` (so a revocation takes effect within that time)."""
        if self.keys is None:
            raise AuthenticationFailed("Incorrect API key provided.")
        digest = self.keys.digest(token)
        now = time.monotonic()
        cached = self._key_cache.get(digest)
        if cached is not None and cached[0] > now:
            key = cached[1]
        else:
            key = await asyncio.to_thread(self.keys.lookup, token)
            if len(self._key_cache) > 10_000:
                self._key_cache.clear()
            self._key_cache[digest] = (now + self.options.key_cache_seconds, key)
        if key is None:
            raise AuthenticationFailed("Incorrect API key provided.")
        if not key.usable(time.time()):
            raise AuthenticationFailed("This API key was revoked or has expired.", code="api_key_revoked")
        return Principal(
            key.key_id, name=key.name, agents=frozenset(key.agents) or None, rpm=key.rpm, concurrency=key.concurrency
        )

    async def admit(self, principal: Principal) -> bool:
        """Apply the key's limits (requests per minute, requests in flight); True when a slot was taken that
        `release_slot` must give back."""
        if self.keys is None:
            return False
        if principal.rpm:
            used, reset = await asyncio.to_thread(self.keys.count_request, principal.key_id)
            if used > principal.rpm:
                raise RateLimited(
                    f"This key is limited to {principal.rpm} requests per minute.",
                    headers={
                        "Retry-After": str(reset),
                        "x-ratelimit-limit-requests": str(principal.rpm),
                        "x-ratelimit-remaining-requests": "0",
                        "x-ratelimit-reset-requests": f"{reset}s",
                    },
                )
        if principal.concurrency:
            in_flight = await asyncio.to_thread(self.keys.enter, principal.key_id)
            if in_flight > principal.concurrency:
                await asyncio.to_thread(self.keys.leave, principal.key_id)
                raise RateLimited(
                    f"This key is limited to {principal.concurrency} concurrent requests.",
                    code="concurrency_limit_exceeded",
                    headers={"Retry-After": "1", "x-ratelimit-limit-concurrency": str(principal.concurrency)},
                )
            return True
        return False

    async def finish_request(self, principal: Principal, slot: bool, usage: dict[str, int]) -> None:
        """Give back the concurrency slot and record the request's usage for its key (one atomic write)."""
        if self.keys is None:
            return
        if slot:
            await asyncio.to_thread(self.keys.leave, principal.key_id)
        if self.options.record_usage:
            await asyncio.to_thread(self.keys.record_usage, principal.key_id, usage)

    # ---------------------------------------------------------------------------------------------- models

    async def list_models(self, principal: Principal) -> ModelList:
        agents = [a for a in await self.agents.list_agents() if principal.allows(a.id, a.name)]
        counts: dict[str, int] = {}
        for agent in agents:
            counts[agent.name] = counts.get(agent.name, 0) + 1
        return ModelList(data=[self._model(a, counts) for a in agents])

    async def get_model(self, principal: Principal, model: str) -> Model:
        agent = await self._resolve(model, principal)
        agents = await self.agents.list_agents()
        counts = {agent.name: sum(1 for a in agents if a.name == agent.name)}
        return self._model(agent, counts)

    @staticmethod
    def _model(agent: AgentInfo, name_counts: dict[str, int]) -> Model:
        model_id = agent.name if name_counts.get(agent.name, 0) <= 1 else agent.id
        return Model(id=model_id, created=agent.created, owned_by="letta")

    async def _resolve(self, model: str, principal: Principal) -> AgentInfo:
        agent = await self.agents.resolve(model)
        if not principal.allows(agent.id, agent.name):
            raise ModelNotFound(model)  # the same answer as for an agent that does not exist
        log.bind(agent_id=agent.id)
        return agent

    # ------------------------------------------------------------------------------------------------ chat

    async def _prepare(
        self,
        principal: Principal,
        request: ChatCompletionRequest,
        idempotency_key: str | None = None,
        thread: ThreadRequest | None = None,
    ) -> _Turn:
        check_supported(request)
        turn = plan_turn(request.messages)
        tools = client_tools(request)
        agent = await self._resolve(request.model, principal)
        conversation = await self._conversation(principal, agent, thread, request.messages)
        auto = (thread.mode if thread and thread.mode else self.options.thread_mode) == "auto" and not (
            thread and (thread.conversation_id or thread.chat_key)
        )
        if self.options.system_prompt_block:
            await self._keep_system_prompt(agent, request)
        claim: PendingRecord | None = None
        order: list[str] | None = None
        if turn.is_resume:
            try:
                claim = await asyncio.to_thread(
                    self.approvals.claim,
                    owner=principal.key_id,
                    agent_id=agent.id,
                    conversation_id=conversation,
                    tool_call_ids=[r.tool_call_id for r in turn.tool_results],
                )
            except AlreadyAnswered as answered:
                log.info("tool results already answered: replaying", run_id=answered.run_id)
                return _Turn(agent, [], tools, None, conversation, replay_run=answered.run_id, auto=auto)
            except ResumeUnconfirmed as unconfirmed:
                answered = await self._confirm(unconfirmed.record, agent)
                return _Turn(agent, [], tools, None, conversation, replay_run=answered, auto=auto)
            except StaleResume as stale:
                recovered = await self._recover(stale.record, agent)
                if isinstance(recovered, str):
                    return _Turn(agent, [], tools, None, conversation, replay_run=recovered, auto=auto)
                claim = recovered
            order = [c.id for c in claim.tool_calls]
            log.bind(resume_of=claim.run_id)
            # The same tool results always carry the same otids, so Letta can recognise a retry as well.
            seed = f"resume:{agent.id}:{claim.ids_key}"
            return _Turn(agent, letta_messages(turn, order, otid_seed=seed), tools, claim, conversation, auto=auto)
        if idempotency_key:
            fingerprint = request_fingerprint(request.model, turn.user_messages, tools)
            begun = await asyncio.to_thread(self.idempotency.begin, principal.key_id, idempotency_key, fingerprint)
            if isinstance(begun, Answered):
                log.info("idempotent request already answered: replaying", run_id=begun.run_id)
                return _Turn(agent, [], tools, None, conversation, replay_run=begun.run_id, auto=auto)
            seed = f"idem:{principal.key_id}:{idempotency_key}"
            return _Turn(
                agent,
                letta_messages(turn, otid_seed=seed),
                tools,
                None,
                conversation,
                idem=begun,
                fingerprint=fingerprint,
                auto=auto,
            )
        return _Turn(agent, letta_messages(turn), tools, None, conversation, auto=auto)

    async def _keep_system_prompt(self, agent: AgentInfo, request: ChatCompletionRequest) -> None:
        """Keep the client's system prompt in the agent's memory block `client_system_prompt`, written only when it
        changed (its hash is remembered in the state store, and in memory for this instance)."""
        prompt = system_prompt(request)
        if not prompt:
            return
        limit = int(self.options.system_prompt_block or 0)
        if len(prompt) > limit:
            prompt = prompt[: limit - 40] + "\n[... truncated by the gateway ...]"
        digest = hashlib.sha256(prompt.encode()).hexdigest()
        if self._system_prompt_seen.get(agent.id) == digest:
            return
        stored = await asyncio.to_thread(self.approvals.backend.get_item, f"sysprompt#{agent.id}", "block")
        if stored is None or stored.get("sha256") != digest:
            await self.agents.write_block(
                agent.id,
                SYSTEM_PROMPT_BLOCK,
                prompt,
                limit,
                "The system prompt of the client application the user works in (its conventions and tools).",
            )
            await asyncio.to_thread(
                self.approvals.backend.put_item, f"sysprompt#{agent.id}", "block", {"sha256": digest}
            )
            log.info("client system prompt written to memory", block=SYSTEM_PROMPT_BLOCK, chars=len(prompt))
        self._system_prompt_seen[agent.id] = digest

    async def _conversation(
        self, principal: Principal, agent: AgentInfo, thread: ThreadRequest | None, request_messages: Sequence[Any]
    ) -> str | None:
        """The Letta conversation (thread) this request belongs to; None = the agent's default thread."""
        thread = thread or ThreadRequest()
        if thread.conversation_id:
            if await self.agents.conversation_agent(thread.conversation_id) != agent.id:
                raise NotFound(
                    f"No conversation '{thread.conversation_id}' for this agent.",
                    param="X-Letta-Conversation-Id",
                    code="conversation_not_found",
                )
            return thread.conversation_id
        if thread.chat_key:
            return await self._chat_conversation(principal, agent, thread.chat_key)
        if (thread.mode or self.options.thread_mode) == "auto":
            return await self._auto_conversation(principal, agent, request_messages)
        return None

    async def _auto_conversation(self, principal: Principal, agent: AgentInfo, messages: Sequence[Any]) -> str | None:
        """Auto threads: a new chat (no assistant message yet) gets a new conversation; a later request of that chat
        is recognised by the tool call ids the gateway gave it, never by its text (two chats with the same words
        stay apart). A chat whose answers carried no tool call stays on the agent's default thread."""
        assistants = [m for m in messages if m.role == "assistant"]
        if not assistants:
            created = await self.agents.create_conversation(agent.id, summary="chat (auto)")
            log.info("new chat: created a conversation", conversation_id=created)
            return created
        for message in reversed(assistants):
            for call in message.tool_calls or ():
                known = await asyncio.to_thread(
                    self.approvals.backend.get_item, f"issued#{principal.key_id}#{agent.id}", call.id
                )
                if known is not None:
                    return str(known["conversation_id"])
        return None

    async def _remember_issued(self, principal: Principal, turn: _Turn, call_ids: Sequence[str]) -> None:
        """In auto mode, remember which conversation a tool call id the client received belongs to."""
        if turn.auto and turn.conversation_id and call_ids:
            await asyncio.to_thread(
                self.approvals.backend.put_item,
                f"issued#{principal.key_id}#{turn.agent.id}",
                call_ids[0],
                {"conversation_id": turn.conversation_id},
            )

    async def _chat_conversation(self, principal: Principal, agent: AgentInfo, chat_key: str) -> str:
        key = hashlib.sha256(chat_key.encode()).hexdigest()
        pk = f"chat#{principal.key_id}#{agent.id}"
        known = await asyncio.to_thread(self.approvals.backend.get_item, pk, key)
        if known is not None:
            return str(known["conversation_id"])
        created = await self.agents.create_conversation(agent.id, summary=f"chat {key[:12]}")
        stored = await asyncio.to_thread(
            self.approvals.backend.put_item, pk, key, {"conversation_id": created}, only_if_absent=True
        )
        if not stored:  # another request of the same chat created one first: use that one
            known = await asyncio.to_thread(self.approvals.backend.get_item, pk, key)
            return str(known["conversation_id"]) if known else created
        log.info("created a conversation for a chat", conversation_id=created)
        return created

    async def _confirm(self, record: PendingRecord, agent: AgentInfo) -> str:
        """Another request claimed these tool results within its lease. A successful resume records nothing after
        its claim (one write per resume), so Letta tells the rest: a finished run that answered them is replayed
        (and the record marked done, so later retries need no search); otherwise that request is still at it."""
        ids = [c.id for c in record.tool_calls]
        run_id = await self.agents.find_answering_run(agent.id, ids, record.conversation_id, finished=True)
        if run_id is None:
            raise ResumeInProgress(
                "These tool results are being submitted to the agent by another request. Retry shortly.",
                headers={"Retry-After": "2"},
            )
        await asyncio.to_thread(self.approvals.complete, record, run_id)
        log.info("tool results already answered: replaying", run_id=run_id)
        return run_id

    async def _recover(self, record: PendingRecord, agent: AgentInfo) -> PendingRecord | str:
        """A request claimed these tool results and died before finishing. Letta knows whether they arrived: if the
        agent still waits for them, this request takes the claim over and sends them; if they arrived, the run that
        answered them is replayed."""
        ids = [c.id for c in record.tool_calls]
        waiting = set(await self.agents.pending_tool_call_ids(agent.id, record.conversation_id))
        if set(ids) <= waiting:
            log.info("recovering a stale resume: Letta never received it", tool_calls=ids)
            return await asyncio.to_thread(self.approvals.take_over, record)
        run_id = await self.agents.find_answering_run(agent.id, ids, record.conversation_id)
        await asyncio.to_thread(self.approvals.complete, record, run_id)
        if run_id is None:
            raise ToolResultsAlreadySubmitted(
                "These tool results were submitted by a request that did not finish, and Letta no longer waits for "
                "them. Send a new message to continue."
            )
        log.info("recovering a stale resume: replaying the run that answered it", run_id=run_id)
        return run_id

    async def _replayed(self, turn: _Turn, request: ChatCompletionRequest) -> ChatCompletion:
        """The answer Letta gave to these tool results the first time, read back from its run."""
        assert turn.replay_run is not None
        response = await self.agents.run_response(turn.replay_run)
        completion, _ = self._translate(response, request, turn)
        return completion

    def _translate(
        self, response: dict[str, Any], request: ChatCompletionRequest, turn: _Turn
    ) -> tuple[ChatCompletion, Pause | None]:
        return completion_from_letta(
            response,
            completion_id=completion_id(),
            created=int(time.time()),
            model=request.model,
            tool_names=tool_names(turn.tools),
            completion_tool=self._completion_tool(turn.tools),
            reasoning_alias=self.options.reasoning_alias,
        )

    async def _call_letta(
        self,
        principal: Principal,
        request: ChatCompletionRequest,
        turn: _Turn,
        deadline: float | None,
        call: Callable[[list[dict[str, Any]]], Awaitable[T]],
    ) -> tuple[T, PendingRecord | None]:
        """Send the turn. A new message to an agent still waiting on tool calls this key abandoned first denies
        them (Letta then tells the agent why) in the same request, so the agent is never left blocked. A claimed
        record goes back to pending when Letta did not take the request."""
        claim = turn.claim
        try:
            try:
                return await _within(deadline, call(turn.messages)), claim
            except AgentPendingApproval:
                if claim is not None:
                    raise
                claim, denial = await self._abandon(principal, turn.agent, turn.conversation_id)
                result = await _within(deadline, call([denial, *turn.messages]))
                log.info("denied abandoned tool calls", tool_calls=[a["tool_call_id"] for a in denial["approvals"]])
                if claim is not None:
                    # Denied, not answered: late results for these calls are refused, not replayed.
                    await asyncio.to_thread(self.approvals.complete, claim, None)
                return result, None
        except GatewayError as error:
            if claim is not None:
                await asyncio.to_thread(self.approvals.release, claim)
            if turn.idem is not None:
                await asyncio.to_thread(self.idempotency.abort, turn.idem)
            raise await self._explain(error, principal, turn.agent, request.model, turn.conversation_id) from None

    async def _abandon(
        self, principal: Principal, agent: AgentInfo, conversation_id: str | None
    ) -> tuple[PendingRecord | None, dict[str, Any]]:
        record = await asyncio.to_thread(self.approvals.abandon, principal.key_id, agent.id, conversation_id)
        if record is not None:
            ids = [c.id for c in record.tool_calls]
        elif self.options.deny_unknown_approvals:
            ids = await self.agents.pending_tool_call_ids(agent.id, conversation_id)
        else:
            ids = []
        if not ids:
            raise AgentPendingApproval("The agent is waiting for approval of a tool call.")
        return record, deny_message(ids, ABANDONED_REASON)

    async def _explain(
        self, error: GatewayError, principal: Principal, agent: AgentInfo, model: str, conversation_id: str | None
    ) -> GatewayError:
        """Make Letta's refusals actionable for an OpenAI client."""
        if isinstance(error, LettaNotFound):
            self.agents.forget(model)
            return ModelNotFound(model)
        if isinstance(error, AgentPendingApproval):
            record = await asyncio.to_thread(self.approvals.current, principal.key_id, agent.id, conversation_id)
            if record is not None and record.status == "pending":
                calls = ", ".join(f"{c.id} ({c.name})" for c in record.tool_calls)
                return AgentPendingApproval(
                    f"The agent is waiting for the results of its tool calls {calls}. Send them as role 'tool' "
                    "messages after the assistant message holding those tool calls, then continue."
                )
            return AgentPendingApproval(
                "The agent is waiting for approval of a tool call that was not made through this gateway key. "
                "Answer or deny it in Letta, or enable GATEWAY_DENY_UNKNOWN_APPROVALS to let new messages deny "
                "it, then retry."
            )
        return error

    async def _save_pause(self, principal: Principal, turn: _Turn, pause: Pause, run_id: str | None) -> None:
        claim = turn.claim
        await asyncio.to_thread(
            self.approvals.save_pause,
            owner=principal.key_id,
            agent_id=turn.agent.id,
            conversation_id=turn.conversation_id,
            run_id=pause.run_id,
            approval_message_id=pause.approval_message_id,
            tool_calls=[ToolCallEntry(c.id, c.name) for c in pause.calls],
            answered=claim,
            answered_run_id=run_id,
        )
        log.info("agent paused for client tools", run_id=pause.run_id, tool_calls=[c.id for c in pause.calls])

    async def _side_request(self, principal: Principal, request: ChatCompletionRequest) -> ChatCompletion:
        """Answer a client's helper request in a temporary conversation of the agent, removed afterwards, so that
        it leaves no trace in the agent's threads; the client's messages are its context."""
        check_supported(request)
        agent = await self._resolve(request.model, principal)
        conversation = await self.agents.create_conversation(agent.id, summary="side request (temporary)")
        log.info("side request in a temporary conversation", conversation_id=conversation)
        try:
            response = await self.agents.send(
                agent.id, [{"role": "user", "content": transcript(request)}], [], conversation
            )
        finally:
            try:
                await self.agents.delete_conversation(conversation)
            except GatewayError:
                log.warning("could not delete a temporary conversation", conversation_id=conversation)
        completion, _ = completion_from_letta(
            response,
            completion_id=completion_id(),
            created=int(time.time()),
            model=request.model,
            tool_names=frozenset(),
        )
        _count_turn(None, None, completion.usage)
        return completion

    async def complete(
        self,
        principal: Principal,
        request: ChatCompletionRequest,
        deadline: float | None = None,
        idempotency_key: str | None = None,
        thread: ThreadRequest | None = None,
    ) -> ChatCompletion:
        if is_side_request(request, self._side_request_patterns):
            return await self._side_request(principal, request)
        turn = await self._prepare(principal, request, idempotency_key, thread)
        if turn.replay_run is not None:
            return await self._replayed(turn, request)
        agent = turn.agent
        response, claim = await self._call_letta(
            principal,
            request,
            turn,
            deadline,
            lambda messages: self.agents.send(agent.id, messages, turn.tools, turn.conversation_id),
        )
        run_id = _first_run_id(response)
        if turn.idem is not None:
            await asyncio.to_thread(self.idempotency.finish, turn.idem, turn.fingerprint, run_id)
        try:
            completion, pause = self._translate(response, request, turn)
        except GatewayError:
            if claim is not None:
                await asyncio.to_thread(self.approvals.complete, claim, run_id)
            raise
        if pause is not None:
            await self._save_pause(principal, turn, pause, run_id)  # also records which run answered the claim
        _count_turn(claim, pause, completion.usage)
        await self._remember_issued(principal, turn, [c.id for c in completion.choices[0].message.tool_calls or ()])
        return completion

    async def open_stream(
        self,
        principal: Principal,
        request: ChatCompletionRequest,
        deadline: float | None = None,
        idempotency_key: str | None = None,
        thread: ThreadRequest | None = None,
    ) -> AsyncIterator[bytes]:
        """Start the turn; failures before Letta streams anything raise here and get a proper HTTP status."""
        include_usage = bool(request.stream_options and request.stream_options.include_usage)
        if is_side_request(request, self._side_request_patterns):
            completion = await self._side_request(principal, request)
            return _replay_stream(chunks_from_completion(completion, include_usage))
        turn = await self._prepare(principal, request, idempotency_key, thread)
        include_usage = bool(request.stream_options and request.stream_options.include_usage)
        if turn.replay_run is not None:
            completion = await self._replayed(turn, request)
            return _replay_stream(chunks_from_completion(completion, include_usage))
        agent = turn.agent
        stream, claim = await self._call_letta(
            principal,
            request,
            turn,
            deadline,
            lambda messages: self.agents.open_stream(agent.id, messages, turn.tools, turn.conversation_id),
        )
        translator = StreamTranslator(
            completion_id=completion_id(),
            created=int(time.time()),
            model=request.model,
            tool_names=tool_names(turn.tools),
            include_usage=include_usage,
            completion_tool=self._completion_tool(turn.tools),
            reasoning_alias=self.options.reasoning_alias,
        )
        return self._relay(principal, agent, stream, translator, claim, deadline, turn)

    async def _relay(
        self,
        principal: Principal,
        agent: AgentInfo,
        stream: LettaStream,
        translator: StreamTranslator,
        claim: PendingRecord | None,
        deadline: float | None,
        turn: _Turn,
    ) -> AsyncIterator[bytes]:
        accepted = claim is None and turn.idem is None
        try:
            yield sse.event(translator.opening())
            async for event in paced(stream.events(), self.options.keepalive_seconds, deadline):
                if event is None:
                    yield sse.KEEPALIVE
                    continue
                if not accepted:
                    # Letta is answering: it accepted the request (a claim stays as it is: see _confirm).
                    if turn.idem is not None:
                        await asyncio.to_thread(
                            self.idempotency.finish, turn.idem, turn.fingerprint, event.get("run_id")
                        )
                    accepted = True
                for item in translator.feed(event):
                    yield sse.KEEPALIVE if item is KEEPALIVE else sse.event(item)  # type: ignore[arg-type]
            reason, pause = translator.outcome()
            if pause is not None:
                await self._save_pause(principal, turn, pause, translator.run_id)
            _count_turn(claim, pause, usage_from_letta(translator.usage))
            closing = translator.closing(reason)
            await self._remember_issued(principal, turn, translator.issued_call_ids())
            for chunk in closing:
                yield sse.event(chunk)
            yield sse.DONE
        except GatewayError as error:
            if not accepted and claim is not None:
                await asyncio.to_thread(self.approvals.release, claim)
            if not accepted and turn.idem is not None:
                await asyncio.to_thread(self.idempotency.abort, turn.idem)
            log.warning("stream failed", error_code=error.code, status=error.status_code)
            yield sse.event(error.envelope())
        except Exception:
            log.error("stream failed unexpectedly", exc_info=True)
            yield sse.event(UpstreamError("The gateway failed while streaming.", code="internal_error").envelope())
        finally:
            await stream.aclose()


def _count_turn(claim: PendingRecord | None, pause: Pause | None, usage: CompletionUsage | None) -> None:
    if usage is not None:
        log.count(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens)
    if pause is not None:
        log.count(tool_pauses=1)
    log.metric("Turns")
    if claim is not None:
        log.metric("Resumes")
    if pause is not None:
        log.metric("ToolPauses")


async def _replay_stream(chunks: list[Any]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield sse.event(chunk)
    yield sse.DONE


@dataclass(frozen=True)
class _Turn:
    agent: AgentInfo
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    claim: PendingRecord | None
    conversation_id: str | None = None
    replay_run: str | None = None
    idem: Started | None = None
    fingerprint: str = ""
    auto: bool = False


def _first_run_id(response: dict[str, Any]) -> str | None:
    for message in response.get("messages") or ():
        if message.get("run_id"):
            return message["run_id"]
    return None

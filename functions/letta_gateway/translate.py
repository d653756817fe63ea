"""Pure translation between OpenAI chat completions and Letta agent messages. No I/O.

Inbound: which part of an OpenAI transcript is new for the stateful agent, and the Letta request that carries it.
Outbound: a Letta response (or its event stream) as an OpenAI `ChatCompletion` (or chunks), plus the tool calls the
agent paused on.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import AgentError, Conflict, InvalidRequest, UpstreamError
from .wire import (
    ChatCompletion,
    ChatCompletionAssistantMessageParam,
    ChatCompletionChunk,
    ChatCompletionContentPartImage,
    ChatCompletionContentPartText,
    ChatCompletionMessage,
    ChatCompletionMessageParam,
    ChatCompletionMessageToolCall,
    ChatCompletionRequest,
    ChatCompletionToolMessageParam,
    ChatCompletionUserMessageParam,
    Choice,
    ChoiceDelta,
    ChoiceDeltaToolCall,
    ChoiceDeltaToolCallFunction,
    ChunkChoice,
    CompletionTokensDetails,
    CompletionUsage,
    FinishReason,
    Function,
    PromptTokensDetails,
)

# ------------------------------------------------------------------------------------------------- inbound


SYNTHETIC_PREFIX = "call_lgwdone_"


def synthetic_call_id() -> str:
    """Id of a completion-tool call the gateway made up for a text-only turn (its result is user feedback)."""
    return SYNTHETIC_PREFIX + uuid.uuid4().hex[:24]


@dataclass(frozen=True)
class ToolResult:
    tool_call_id: str
    content: str


@dataclass(frozen=True)
class TurnInput:
    """What a request adds to the agent's thread: tool results (a resume), then user messages."""

    tool_results: tuple[ToolResult, ...] = ()
    user_messages: tuple[dict[str, Any], ...] = ()

    @property
    def is_resume(self) -> bool:
        return bool(self.tool_results)


def _text_of(content: str | Sequence[Any] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(part.text for part in content if isinstance(part, ChatCompletionContentPartText))


def _image_content(url: str, param: str) -> dict[str, Any]:
    if url.startswith("data:"):
        header, sep, data = url[5:].partition(",")
        media_type, _, encoding = header.partition(";")
        if not sep or encoding != "base64" or not media_type.startswith("image/"):
            raise InvalidRequest("Image data URLs must look like 'data:image/<type>;base64,<data>'.", param=param)
        try:
            base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequest("Image data URL is not valid base64.", param=param) from None
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    if url.startswith(("http://", "https://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise InvalidRequest("Image URLs must be http(s) URLs or base64 data URLs.", param=param)


def user_content(message: ChatCompletionUserMessageParam, index: int) -> str | list[dict[str, Any]]:
    """Letta content for an OpenAI user message: text parts joined by newlines, images as image parts."""
    param = f"messages[{index}].content"
    if isinstance(message.content, str):
        if not message.content:
            raise InvalidRequest("User message content must not be empty.", param=param)
        return message.content
    parts: list[dict[str, Any]] = []
    texts: list[str] = []
    has_image = False
    for n, part in enumerate(message.content):
        if isinstance(part, ChatCompletionContentPartImage):
            if texts:
                parts.append({"type": "text", "text": "\n".join(texts)})
                texts = []
            parts.append(_image_content(part.image_url.url, f"{param}[{n}].image_url.url"))
            has_image = True
        else:
            texts.append(part.text)
    if texts:
        parts.append({"type": "text", "text": "\n".join(texts)})
    if not parts or (not has_image and not any(p["text"] for p in parts)):
        raise InvalidRequest("User message content must not be empty.", param=param)
    return parts if has_image else parts[0]["text"]


def plan_turn(messages: Sequence[ChatCompletionMessageParam]) -> TurnInput:
    """Select what follows the last assistant message; the agent already holds everything before it.

    System and developer messages are never sent (the agent has its own system prompt). Tool results must come
    directly after the assistant message whose tool calls they answer; user messages may follow them. The result of
    a completion call the gateway made up (a text-only answer offered as the client's completion tool) is the user's
    reply to that answer, so it reaches the agent as a user message.
    """
    last_assistant = -1
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], ChatCompletionAssistantMessageParam):
            last_assistant = i
            break
    called: set[str] = set()
    if last_assistant >= 0:
        called = {c.id for c in messages[last_assistant].tool_calls or ()}  # type: ignore[union-attr]

    results: list[ToolResult] = []
    replies: list[dict[str, Any]] = []
    users: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i in range(last_assistant + 1, len(messages)):
        message = messages[i]
        if isinstance(message, ChatCompletionToolMessageParam):
            param = f"messages[{i}]"
            if message.tool_call_id not in called:
                raise InvalidRequest(
                    f"Tool message answers tool_call_id '{message.tool_call_id}', which no preceding assistant "
                    "message called.",
                    param=f"{param}.tool_call_id",
                )
            if users:
                raise InvalidRequest(
                    "Tool messages must directly follow the assistant message with the tool calls they answer.",
                    param=param,
                )
            if message.tool_call_id in seen:
                raise InvalidRequest(
                    f"Duplicate tool message for tool_call_id '{message.tool_call_id}'.",
                    param=f"{param}.tool_call_id",
                )
            seen.add(message.tool_call_id)
            text = _text_of(message.content)
            if message.tool_call_id.startswith(SYNTHETIC_PREFIX):
                if text:
                    replies.append({"role": "user", "content": text})
            else:
                results.append(ToolResult(message.tool_call_id, text))
        elif isinstance(message, ChatCompletionUserMessageParam):
            users.append({"role": "user", "content": user_content(message, i)})
    if not results and not replies and not users:
        raise InvalidRequest(
            "Nothing new to send to the agent: the request must end with a user message or with tool results "
            "after the last assistant message.",
            param="messages",
        )
    return TurnInput(tuple(results), tuple(replies + users))


DEFAULT_SIDE_REQUEST_PATTERNS = (
    r"Your task is to create a detailed summary of the conversation so far",  # Roo Code: context condensing
    r"Generate an enhanced version of this prompt",  # Roo Code: prompt enhancement
    r"^### Task:",  # Open WebUI: title, tags, follow-up suggestions
)


def is_side_request(request: ChatCompletionRequest, patterns: Sequence[re.Pattern[str]]) -> bool:
    """A helper request of the client (condense a transcript, title a chat, ...), not a turn of the agent's work:
    it offers no tools and its system prompt or last user message matches one of the patterns."""
    if request.tools or not patterns:
        return False
    texts = [_message_text(m) for m in request.messages if m.role in ("system", "developer")]
    users = [m for m in request.messages if m.role == "user"]
    if users:
        texts.append(_message_text(users[-1]))
    return any(p.search(t) for p in patterns for t in texts)


def _message_text(message: ChatCompletionMessageParam) -> str:
    content = getattr(message, "content", None)
    if isinstance(content, list):
        return "\n".join(getattr(part, "text", "") or "" for part in content)
    return content or ""


def system_prompt(request: ChatCompletionRequest) -> str:
    """The client's system (and developer) messages as one text."""
    return "\n\n".join(_message_text(m) for m in request.messages if m.role in ("system", "developer")).strip()


def transcript(request: ChatCompletionRequest) -> str:
    """The client's whole request as one text, for a side request answered in a temporary conversation."""
    parts = []
    for message in request.messages:
        text = _message_text(message)
        calls = getattr(message, "tool_calls", None) or ()
        if calls:
            text += "".join(f"\n(calls {c.function.name} {c.function.arguments})" for c in calls)
        parts.append(f"[{message.role}]\n{text}")
    return "\n\n".join(parts)


def check_supported(request: ChatCompletionRequest) -> None:
    """Reject parameters a Letta agent cannot honour; sampling parameters are accepted and ignored."""
    if request.n is not None and request.n > 1:
        raise InvalidRequest("Only n=1 is supported: a Letta agent produces one answer per turn.", param="n")
    if request.functions is not None or request.function_call is not None:
        raise InvalidRequest("The legacy 'functions' API is not supported; use 'tools'.", param="functions")
    if request.logprobs:
        raise InvalidRequest("logprobs are not available from Letta agents.", param="logprobs")
    choice = request.tool_choice
    if choice is not None and choice not in ("auto", "none"):
        raise InvalidRequest(
            "Only tool_choice 'auto' and 'none' are supported: the agent decides which tools to call.",
            param="tool_choice",
        )
    if request.stream_options is not None and not request.stream:
        raise InvalidRequest("stream_options is only allowed when stream is true.", param="stream_options")


def client_tools(request: ChatCompletionRequest) -> list[dict[str, Any]]:
    """OpenAI function tools as Letta `client_tools` ({name, description, parameters}); none for tool_choice none."""
    if not request.tools or request.tool_choice == "none":
        return []
    tools: list[dict[str, Any]] = []
    names: set[str] = set()
    for i, tool in enumerate(request.tools):
        fn = tool.function
        if fn.name in names:
            raise InvalidRequest(f"Duplicate tool name '{fn.name}'.", param=f"tools[{i}].function.name")
        names.add(fn.name)
        entry: dict[str, Any] = {
            "name": fn.name,
            "parameters": fn.parameters if fn.parameters is not None else {"type": "object", "properties": {}},
        }
        if fn.description is not None:
            entry["description"] = fn.description
        tools.append(entry)
    return tools


def otid(seed: str, index: int) -> str:
    """A deterministic Letta offline-threading id: the same logical message always gets the same one."""
    return f"message-{uuid.uuid5(uuid.NAMESPACE_URL, f'letta-gateway:{seed}:{index}')}"


def letta_messages(
    turn: TurnInput, answered: Sequence[str] | None = None, otid_seed: str | None = None
) -> list[dict[str, Any]]:
    """The Letta `messages` for a turn: one approval message carrying every tool result, then user messages.

    Client tools are answered with `type: tool` returns, never `approve: true` (Letta would run the tool itself).
    `answered` orders the returns as the agent asked for them. With `otid_seed`, each message carries a
    deterministic `otid`, so a retry of the same logical request is recognisable by Letta too.
    """
    out: list[dict[str, Any]] = []
    if turn.tool_results:
        by_id = {r.tool_call_id: r for r in turn.tool_results}
        order = answered if answered is not None else [r.tool_call_id for r in turn.tool_results]
        out.append(
            {
                "type": "approval",
                "approvals": [
                    {"type": "tool", "tool_call_id": i, "tool_return": by_id[i].content, "status": "success"}
                    for i in order
                ],
            }
        )
    out.extend(turn.user_messages)
    if otid_seed is not None:
        out = [{**message, "otid": otid(otid_seed, i)} for i, message in enumerate(out)]
    return out


def deny_message(tool_call_ids: Sequence[str], reason: str) -> dict[str, Any]:
    """A Letta approval message refusing tool calls; the agent reads `reason` as the tool's error."""
    return {
        "type": "approval",
        "approvals": [
            {"type": "approval", "tool_call_id": i, "approve": False, "reason": reason} for i in tool_call_ids
        ],
    }


# ------------------------------------------------------------------------------------------------ outbound

FINISH_REASONS: Mapping[str, FinishReason] = {
    "end_turn": "stop",
    "no_tool_call": "stop",
    "tool_rule": "stop",
    "requires_approval": "tool_calls",
    "max_steps": "length",
    "max_tokens_exceeded": "length",
}
ERROR_STOP_REASONS = frozenset(
    {
        "error",
        "llm_api_error",
        "invalid_llm_response",
        "invalid_tool_call",
        "cancelled",
        "insufficient_credits",
        "context_window_overflow_in_system_prompt",
    }
)


def finish_reason(stop_reason: str | None) -> FinishReason:
    """OpenAI finish_reason for a Letta stop reason; error stop reasons raise `AgentError`."""
    if stop_reason in ERROR_STOP_REASONS:
        raise AgentError(f"The Letta agent's run ended with stop reason '{stop_reason}'.", code=f"agent_{stop_reason}")
    if stop_reason is None:
        raise UpstreamError("Letta ended the turn without a stop reason.")
    return FINISH_REASONS.get(stop_reason, "stop")


def usage_from_letta(usage: Mapping[str, Any] | None) -> CompletionUsage | None:
    if not usage:
        return None
    prompt = usage.get("prompt_tokens") or 0
    completion = usage.get("completion_tokens") or 0
    cached = usage.get("cached_input_tokens")
    reasoning = usage.get("reasoning_tokens")
    return CompletionUsage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=usage.get("total_tokens") or prompt + completion,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=cached) if cached is not None else None,
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=reasoning)
        if reasoning is not None
        else None,
    )


@dataclass(frozen=True)
class PendingCall:
    id: str
    name: str


@dataclass(frozen=True)
class Pause:
    """The agent stopped for client tool calls."""

    run_id: str | None
    approval_message_id: str | None
    calls: tuple[PendingCall, ...]


def _approval_calls(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("tool_calls")
    if calls is None:
        calls = message.get("tool_call")
    if calls is None:
        return []
    return list(calls) if isinstance(calls, list) else [calls]


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.get("text") or "" for p in content if isinstance(p, Mapping))


def _pause_or_conflict(run_id: str | None, message_id: str | None, calls: list[PendingCall], other: list[str]) -> Pause:
    if not calls:
        names = ", ".join(sorted(set(other))) or "unknown"
        raise Conflict(
            f"The agent is waiting for approval of server-side tool call(s) ({names}), which an OpenAI client "
            "cannot answer. Approve or deny them in Letta, then continue.",
            code="server_tool_approval_required",
        )
    return Pause(run_id, message_id, tuple(calls))


# Clients treat an empty assistant turn as an error; a turn with no text and no tool call says so instead.
EMPTY_TURN_TEXT = "(The agent finished its turn without a reply.)"


def completion_tool_call(tool: Mapping[str, Any], text: str) -> ChatCompletionMessageToolCall:
    """A text-only answer as a call to the client's completion tool (e.g. Roo Code's `attempt_completion`), with the
    text in the argument its schema asks for (`result` when it has one, else its first required string)."""
    schema = tool.get("parameters") or {}
    properties = schema.get("properties") or {}
    argument = "result"
    if "result" not in properties:
        strings = [p for p in schema.get("required") or [] if (properties.get(p) or {}).get("type") == "string"]
        argument = strings[0] if strings else "result"
    return ChatCompletionMessageToolCall(
        id=synthetic_call_id(), function=Function(name=tool["name"], arguments=json.dumps({argument: text}))
    )


def completion_from_letta(
    response: Mapping[str, Any],
    *,
    completion_id: str,
    created: int,
    model: str,
    tool_names: frozenset[str],
    completion_tool: Mapping[str, Any] | None = None,
    reasoning_alias: bool = False,
) -> tuple[ChatCompletion, Pause | None]:
    """A Letta `LettaResponse` as one `ChatCompletion`; server-side tool activity is left out."""
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[PendingCall] = []
    tool_calls: list[ChatCompletionMessageToolCall] = []
    other: list[str] = []
    run_id = approval_id = None
    for message in response.get("messages") or ():
        kind = message.get("message_type")
        if kind == "assistant_message":
            text = _content_text(message.get("content"))
            if text:
                texts.append(text)
        elif kind == "reasoning_message":
            if message.get("reasoning"):
                reasoning.append(message["reasoning"])
        elif kind == "approval_request_message":
            run_id, approval_id = message.get("run_id"), message.get("id")
            for call in _approval_calls(message):
                name = call.get("name") or ""
                if name in tool_names:
                    calls.append(PendingCall(call["tool_call_id"], name))
                    tool_calls.append(
                        ChatCompletionMessageToolCall(
                            id=call["tool_call_id"],
                            function=Function(name=name, arguments=call.get("arguments") or "{}"),
                        )
                    )
                else:
                    other.append(name)
    stop = (response.get("stop_reason") or {}).get("stop_reason")
    reason = finish_reason(stop)
    pause = _pause_or_conflict(run_id, approval_id, calls, other) if reason == "tool_calls" else None
    if pause is None:
        tool_calls = []
    message = ChatCompletionMessage(
        content="\n\n".join(texts) if texts else None,
        tool_calls=tool_calls or None,
        reasoning_content="\n\n".join(reasoning) if reasoning else None,
    )
    if reason == "stop" and completion_tool is not None:
        message = ChatCompletionMessage(
            content=None,
            tool_calls=[completion_tool_call(completion_tool, message.content or "")],
            reasoning_content=message.reasoning_content,
        )
        reason = "tool_calls"
    if not message.content and not message.tool_calls:
        message.content = EMPTY_TURN_TEXT
    if reasoning_alias:
        message.reasoning = message.reasoning_content
    completion = ChatCompletion(
        id=completion_id,
        created=created,
        model=model,
        choices=[Choice(message=message, finish_reason=reason)],
        usage=usage_from_letta(response.get("usage")),
    )
    return completion, pause


@dataclass(frozen=True)
class Keepalive:
    """Letta sent a ping: the client gets an SSE comment."""


KEEPALIVE = Keepalive()


@dataclass
class StreamTranslator:
    """Turns Letta stream events into OpenAI chunks, one event at a time.

    Token-mode approval events carry one tool-call fragment each and no index: fragments are grouped by
    `tool_call_id` and given a stable OpenAI `index` in order of first appearance.
    """

    completion_id: str
    created: int
    model: str
    tool_names: frozenset[str]
    include_usage: bool = False
    completion_tool: Mapping[str, Any] | None = None
    reasoning_alias: bool = False
    run_id: str | None = None
    synthetic_call_id: str | None = None
    stop_reason: str | None = None
    usage: Mapping[str, Any] | None = None
    _indexes: dict[str, int] = field(default_factory=dict)
    _calls: list[PendingCall] = field(default_factory=list)
    _other: list[str] = field(default_factory=list)
    _skipped: set[str] = field(default_factory=set)
    _approval_id: str | None = None
    _approval_run: str | None = None
    _last_text_id: str | None = None
    _text: list[str] = field(default_factory=list)

    def chunk(self, delta: ChoiceDelta, finish: FinishReason | None = None) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=self.completion_id,
            created=self.created,
            model=self.model,
            choices=[ChunkChoice(delta=delta, finish_reason=finish)],
        )

    def opening(self) -> ChatCompletionChunk:
        return self.chunk(ChoiceDelta(role="assistant", content=""))

    def feed(self, event: Mapping[str, Any]) -> list[ChatCompletionChunk | Keepalive]:
        kind = event.get("message_type")
        if self.run_id is None and event.get("run_id"):
            self.run_id = event["run_id"]
        if kind == "ping":
            return [KEEPALIVE]
        if kind == "assistant_message":
            text = _content_text(event.get("content"))
            msg_id = event.get("id")
            if self._last_text_id is not None and msg_id != self._last_text_id and text:
                text = "\n\n" + text
            if text:
                self._last_text_id = msg_id
                self._text.append(text)
                return [self.chunk(ChoiceDelta(content=text))]
            return []
        if kind == "reasoning_message":
            if event.get("reasoning"):
                text = event["reasoning"]
                return [
                    self.chunk(ChoiceDelta(reasoning_content=text, reasoning=text if self.reasoning_alias else None))
                ]
            return []
        if kind == "approval_request_message":
            return self._approval(event)
        if kind == "stop_reason":
            self.stop_reason = event.get("stop_reason")
            return []
        if kind == "usage_statistics":
            self.usage = event
            return []
        if kind == "error_message":
            detail = event.get("message") or event.get("detail") or "unknown error"
            raise AgentError(f"The Letta agent failed: {detail}", code=f"agent_{event.get('error_type') or 'error'}")
        return []

    def _approval(self, event: Mapping[str, Any]) -> list[ChatCompletionChunk | Keepalive]:
        self._approval_id = event.get("id") or self._approval_id
        self._approval_run = event.get("run_id") or self._approval_run
        deltas: list[ChoiceDeltaToolCall] = []
        for call in _approval_calls(event):
            call_id = call.get("tool_call_id")
            if not call_id or call_id in self._skipped:
                continue
            args = call.get("arguments")
            index = self._indexes.get(call_id)
            if index is None:
                name = call.get("name") or ""
                if name not in self.tool_names:
                    self._skipped.add(call_id)
                    self._other.append(name)
                    continue
                index = self._indexes[call_id] = len(self._indexes)
                self._calls.append(PendingCall(call_id, name))
                deltas.append(
                    ChoiceDeltaToolCall(
                        index=index,
                        id=call_id,
                        type="function",
                        function=ChoiceDeltaToolCallFunction(name=name, arguments=args or ""),
                    )
                )
            elif args:
                deltas.append(ChoiceDeltaToolCall(index=index, function=ChoiceDeltaToolCallFunction(arguments=args)))
        return [self.chunk(ChoiceDelta(tool_calls=deltas))] if deltas else []

    def issued_call_ids(self) -> list[str]:
        """The tool call ids this answer gave the client."""
        return [c.id for c in self._calls] + ([self.synthetic_call_id] if self.synthetic_call_id else [])

    def outcome(self) -> tuple[FinishReason, Pause | None]:
        """How the turn ended; call once Letta's stream is over."""
        reason = finish_reason(self.stop_reason)
        if reason != "tool_calls":
            return reason, None
        return reason, _pause_or_conflict(
            self._approval_run or self.run_id, self._approval_id, self._calls, self._other
        )

    def closing(self, reason: FinishReason, *, answered: bool | None = None) -> list[ChatCompletionChunk]:
        """The final chunks. `answered`: whether the turn had text or tool calls (derived from what was fed)."""
        chunks: list[ChatCompletionChunk] = []
        if answered is None:
            answered = bool(self._text or self._calls)
        if reason in ("stop", "length") and not answered and self.completion_tool is None:
            chunks.append(self.chunk(ChoiceDelta(content=EMPTY_TURN_TEXT)))
        if reason == "stop" and self.completion_tool is not None:
            # The text streamed already; the client also gets it as its completion tool's call.
            call = completion_tool_call(self.completion_tool, "".join(self._text))
            self.synthetic_call_id = call.id
            delta = ChoiceDeltaToolCall(
                index=0,
                id=call.id,
                type="function",
                function=ChoiceDeltaToolCallFunction(name=call.function.name, arguments=call.function.arguments),
            )
            chunks.append(self.chunk(ChoiceDelta(tool_calls=[delta])))
            reason = "tool_calls"
        chunks.append(self.chunk(ChoiceDelta(), reason))
        if self.include_usage:
            chunks.append(
                ChatCompletionChunk(
                    id=self.completion_id,
                    created=self.created,
                    model=self.model,
                    choices=[],
                    usage=usage_from_letta(self.usage) or CompletionUsage(),
                )
            )
        return chunks


def chunks_from_completion(completion: ChatCompletion, include_usage: bool) -> list[ChatCompletionChunk]:
    """A finished completion as the chunks a stream of it would have had (used to replay an answer)."""
    translator = StreamTranslator(
        completion_id=completion.id,
        created=completion.created,
        model=completion.model,
        tool_names=frozenset(),
        include_usage=include_usage,
    )
    choice = completion.choices[0]
    message = choice.message
    chunks = [translator.opening()]
    if message.reasoning_content:
        chunks.append(translator.chunk(ChoiceDelta(reasoning_content=message.reasoning_content)))
    if message.content:
        chunks.append(translator.chunk(ChoiceDelta(content=message.content)))
    if message.tool_calls:
        deltas = [
            ChoiceDeltaToolCall(
                index=i,
                id=call.id,
                type="function",
                function=ChoiceDeltaToolCallFunction(name=call.function.name, arguments=call.function.arguments),
            )
            for i, call in enumerate(message.tool_calls)
        ]
        chunks.append(translator.chunk(ChoiceDelta(tool_calls=deltas)))
    translator.usage = None
    chunks.extend(translator.closing(choice.finish_reason, answered=True))
    if include_usage and completion.usage is not None:
        chunks[-1].usage = completion.usage
    return chunks


def tool_names(tools: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    return frozenset(t["name"] for t in tools)

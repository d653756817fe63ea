"""OpenAI chat-completions wire models, named as in openai-python's `types/chat`.

Request models validate what clients send (unknown top-level fields are accepted and ignored, as OpenAI-compatible
servers commonly do); response models serialise what the gateway answers.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_serializer

TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


# --------------------------------------------------------------------------------------------------- requests


class ChatCompletionContentPartText(_Lenient):
    type: Literal["text"]
    text: str


class ImageURL(_Lenient):
    url: str = Field(min_length=1)
    detail: Literal["auto", "low", "high"] | None = None


class ChatCompletionContentPartImage(_Lenient):
    type: Literal["image_url"]
    image_url: ImageURL


class ChatCompletionContentPartRefusal(_Lenient):
    type: Literal["refusal"]
    refusal: str


UserContentPart = Annotated[ChatCompletionContentPartText | ChatCompletionContentPartImage, Field(discriminator="type")]
AssistantContentPart = Annotated[
    ChatCompletionContentPartText | ChatCompletionContentPartRefusal, Field(discriminator="type")
]


class Function(_Lenient):
    name: str
    arguments: str


class ChatCompletionMessageToolCall(_Lenient):
    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: Function


class ChatCompletionSystemMessageParam(_Lenient):
    role: Literal["system"]
    content: str | list[ChatCompletionContentPartText]
    name: str | None = None


class ChatCompletionDeveloperMessageParam(_Lenient):
    role: Literal["developer"]
    content: str | list[ChatCompletionContentPartText]
    name: str | None = None


class ChatCompletionUserMessageParam(_Lenient):
    role: Literal["user"]
    content: str | list[UserContentPart]
    name: str | None = None


class ChatCompletionAssistantMessageParam(_Lenient):
    role: Literal["assistant"]
    content: str | list[AssistantContentPart] | None = None
    tool_calls: list[ChatCompletionMessageToolCall] | None = None
    name: str | None = None


class ChatCompletionToolMessageParam(_Lenient):
    role: Literal["tool"]
    content: str | list[ChatCompletionContentPartText]
    tool_call_id: str = Field(min_length=1)


ChatCompletionMessageParam = Annotated[
    ChatCompletionSystemMessageParam
    | ChatCompletionDeveloperMessageParam
    | ChatCompletionUserMessageParam
    | ChatCompletionAssistantMessageParam
    | ChatCompletionToolMessageParam,
    Field(discriminator="role"),
]


class FunctionDefinition(_Lenient):
    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and value.get("type", "object") != "object":
            raise ValueError("function parameters must be a JSON schema of type 'object'")
        return value


class ChatCompletionToolParam(_Lenient):
    type: Literal["function"]
    function: FunctionDefinition


class ChatCompletionNamedToolChoiceFunction(_Lenient):
    name: str


class ChatCompletionNamedToolChoice(_Lenient):
    type: Literal["function"]
    function: ChatCompletionNamedToolChoiceFunction


class StreamOptions(_Lenient):
    include_usage: StrictBool | None = None


class ChatCompletionRequest(BaseModel):
    """`POST /v1/chat/completions` body. Sampling parameters are accepted and ignored: the agent owns its model."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, max_length=256)
    messages: list[ChatCompletionMessageParam] = Field(min_length=1)
    stream: StrictBool | None = False
    stream_options: StreamOptions | None = None
    tools: list[ChatCompletionToolParam] | None = None
    tool_choice: Literal["none", "auto", "required"] | ChatCompletionNamedToolChoice | None = None
    parallel_tool_calls: StrictBool | None = None
    n: int | None = Field(default=None, ge=1, le=128)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1, le=10_000_000)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=10_000_000)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    seed: int | None = None
    stop: str | list[str] | None = None
    user: str | None = None
    logprobs: StrictBool | None = None
    functions: list[Any] | None = None
    function_call: Any | None = None


# -------------------------------------------------------------------------------------------------- responses


class CompletionTokensDetails(BaseModel):
    reasoning_tokens: int | None = None


class PromptTokensDetails(BaseModel):
    cached_tokens: int | None = None


class CompletionUsage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: CompletionTokensDetails | None = None


FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]


class ChatCompletionMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[ChatCompletionMessageToolCall] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None

    @model_serializer(mode="wrap")
    def _omit_empty_extensions(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        for key in ("tool_calls", "reasoning_content", "reasoning"):
            if data.get(key) is None:
                data.pop(key, None)
        return data


class Choice(BaseModel):
    index: int = 0
    message: ChatCompletionMessage
    finish_reason: FinishReason
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: CompletionUsage | None = None
    system_fingerprint: str | None = None


class ChoiceDeltaToolCallFunction(BaseModel):
    name: str | None = None
    arguments: str | None = None


class ChoiceDeltaToolCall(BaseModel):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: ChoiceDeltaToolCallFunction | None = None

    @model_serializer(mode="wrap")
    def _omit_none(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        if data.get("function") is not None:
            data["function"] = {k: v for k, v in data["function"].items() if v is not None}
        return {k: v for k, v in data.items() if v is not None}


class ChoiceDelta(BaseModel):
    """A streamed delta. `content` is always present (empty string allowed): some clients require it."""

    role: Literal["assistant"] | None = None
    content: str = ""
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ChoiceDeltaToolCall] | None = None

    @model_serializer(mode="wrap")
    def _omit_none(self, handler: Any) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class ChunkChoice(BaseModel):
    index: int = 0
    delta: ChoiceDelta
    finish_reason: FinishReason | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: CompletionUsage | None = None
    system_fingerprint: str | None = None

    @model_serializer(mode="wrap")
    def _omit_empty_usage(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        if data.get("usage") is None:
            data.pop("usage", None)
        return data


class Model(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Model]


class ErrorObject(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """`{"error": {...}}`, the envelope of every failure."""

    error: ErrorObject

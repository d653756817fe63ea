"""Pure translation, as parameter tables over whole objects. Letta shapes are the ones recorded in WIRE.md."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter

from letta_gateway.errors import AgentError, Conflict, InvalidRequest
from letta_gateway.translate import (
    KEEPALIVE,
    Pause,
    PendingCall,
    StreamTranslator,
    ToolResult,
    TurnInput,
    check_supported,
    client_tools,
    completion_from_letta,
    finish_reason,
    letta_messages,
    plan_turn,
    usage_from_letta,
)
from letta_gateway.wire import ChatCompletionMessageParam, ChatCompletionRequest, CompletionUsage

MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])

CALL_A = {"id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
CALL_B = {"id": "call_b", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}
PNG = "iVBORw0KGgo="


def plan(messages: list[dict[str, Any]]) -> TurnInput:
    return plan_turn(MESSAGES.validate_python(messages))


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        pytest.param(
            [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
            TurnInput(user_messages=({"role": "user", "content": "hi"},)),
            id="first-turn-drops-system",
        ),
        pytest.param(
            [
                {"role": "user", "content": "old"},
                {"role": "assistant", "content": "old answer"},
                {"role": "developer", "content": "rules"},
                {"role": "user", "content": "new one"},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            ],
            TurnInput(user_messages=({"role": "user", "content": "new one"}, {"role": "user", "content": "a\nb"})),
            id="only-after-last-assistant-text-parts-joined",
        ),
        pytest.param(
            [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": None, "tool_calls": [CALL_A, CALL_B]},
                {"role": "tool", "tool_call_id": "call_a", "content": "A"},
                {
                    "role": "tool",
                    "tool_call_id": "call_b",
                    "content": [{"type": "text", "text": "B1"}, {"type": "text", "text": "B2"}],
                },
                {"role": "user", "content": "<environment_details>x</environment_details>"},
            ],
            TurnInput(
                tool_results=(ToolResult("call_a", "A"), ToolResult("call_b", "B1\nB2")),
                user_messages=({"role": "user", "content": "<environment_details>x</environment_details>"},),
            ),
            id="tool-results-then-user",
        ),
        pytest.param(
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "see"},
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                        {"type": "image_url", "image_url": {"url": "https://x.test/a.jpg"}},
                        {"type": "text", "text": "thanks"},
                    ],
                },
            ],
            TurnInput(
                user_messages=(
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "see"},
                            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                            {"type": "image", "source": {"type": "url", "url": "https://x.test/a.jpg"}},
                            {"type": "text", "text": "thanks"},
                        ],
                    },
                )
            ),
            id="images",
        ),
    ],
)
def test_plan_turn(messages: list[dict[str, Any]], expected: TurnInput) -> None:
    assert plan(messages) == expected


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        pytest.param(
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "messages", id="nothing-new"
        ),
        pytest.param([{"role": "system", "content": "s"}], "messages", id="only-system"),
        pytest.param(
            [{"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": "x", "content": "r"}],
            "messages[1].tool_call_id",
            id="tool-without-call",
        ),
        pytest.param(
            [
                {"role": "assistant", "tool_calls": [CALL_A]},
                {"role": "tool", "tool_call_id": "call_a", "content": "r"},
                {"role": "tool", "tool_call_id": "call_a", "content": "r"},
            ],
            "messages[2].tool_call_id",
            id="duplicate-tool-result",
        ),
        pytest.param(
            [
                {"role": "assistant", "tool_calls": [CALL_A]},
                {"role": "user", "content": "u"},
                {"role": "tool", "tool_call_id": "call_a", "content": "r"},
            ],
            "messages[2]",
            id="tool-after-user",
        ),
        pytest.param([{"role": "user", "content": ""}], "messages[0].content", id="empty-user"),
        pytest.param(
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}]}],
            "messages[0].content[0].image_url.url",
            id="bad-image-scheme",
        ),
        pytest.param(
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}]}],
            "messages[0].content[0].image_url.url",
            id="bad-base64",
        ),
    ],
)
def test_plan_turn_rejects(messages: list[dict[str, Any]], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        plan(messages)
    assert info.value.param == param
    assert info.value.status_code == 400


def request(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "x"}], **fields}
    )


READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
            "additionalProperties": False,
        },
    },
}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param({}, [], id="no-tools"),
        pytest.param(
            {"tools": [READ_FILE]},
            [
                {
                    "name": "read_file",
                    "description": "Read",
                    "parameters": {
                        "type": "object",
                        "properties": {"path": {"type": "string"}},
                        "required": ["path"],
                        "additionalProperties": False,
                    },
                }
            ],
            id="strict-dropped",
        ),
        pytest.param(
            {"tools": [{"type": "function", "function": {"name": "ping"}}]},
            [{"name": "ping", "parameters": {"type": "object", "properties": {}}}],
            id="no-parameters",
        ),
        pytest.param({"tools": [READ_FILE], "tool_choice": "none"}, [], id="tool-choice-none"),
    ],
)
def test_client_tools(fields: dict[str, Any], expected: list[dict[str, Any]]) -> None:
    assert client_tools(request(**fields)) == expected


def test_duplicate_tool_names_rejected() -> None:
    with pytest.raises(InvalidRequest) as info:
        client_tools(request(tools=[READ_FILE, READ_FILE]))
    assert info.value.param == "tools[1].function.name"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"n": 2}, "n"),
        ({"tool_choice": "required", "tools": [READ_FILE]}, "tool_choice"),
        ({"tool_choice": {"type": "function", "function": {"name": "read_file"}}, "tools": [READ_FILE]}, "tool_choice"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"logprobs": True}, "logprobs"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
    ],
)
def test_unsupported_parameters(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        check_supported(request(**fields))
    assert info.value.param == param


def test_sampling_parameters_accepted() -> None:
    check_supported(
        request(
            temperature=0.2,
            top_p=0.9,
            max_tokens=100,
            seed=1,
            stop=["x"],
            user="u",
            parallel_tool_calls=True,
            n=1,
            tool_choice="auto",
        )
    )


def test_letta_messages_orders_returns_as_the_agent_asked() -> None:
    turn = TurnInput(
        tool_results=(ToolResult("b", "B"), ToolResult("a", "A")), user_messages=({"role": "user", "content": "more"},)
    )
    assert letta_messages(turn, ["a", "b"]) == [
        {
            "type": "approval",
            "approvals": [
                {"type": "tool", "tool_call_id": "a", "tool_return": "A", "status": "success"},
                {"type": "tool", "tool_call_id": "b", "tool_return": "B", "status": "success"},
            ],
        },
        {"role": "user", "content": "more"},
    ]


# ---------------------------------------------------------------------------------------------- outbound

USAGE = {
    "message_type": "usage_statistics",
    "completion_tokens": 5,
    "prompt_tokens": 10,
    "total_tokens": 15,
    "step_count": 1,
    "cached_input_tokens": 3,
    "reasoning_tokens": 2,
}
APPROVAL = {
    "id": "message-3f4d",
    "message_type": "approval_request_message",
    "run_id": "run-2125",
    "tool_call": {"name": "read_file", "arguments": '{"path": "src/app.py"}', "tool_call_id": "call_fake0027"},
    "tool_calls": [
        {"name": "read_file", "arguments": '{"path": "src/app.py"}', "tool_call_id": "call_fake0027"},
        {"name": "list_files", "arguments": '{"dir": "lib"}', "tool_call_id": "call_fake0028"},
    ],
}


def completion(
    messages: list[dict[str, Any]], stop: str, names: frozenset[str] = frozenset({"read_file", "list_files"})
):
    return completion_from_letta(
        {"messages": messages, "stop_reason": {"message_type": "stop_reason", "stop_reason": stop}, "usage": USAGE},
        completion_id="chatcmpl-1",
        created=7,
        model="coder",
        tool_names=names,
    )


def test_completion_with_text_reasoning_and_server_tools() -> None:
    result, pause = completion(
        [
            {"message_type": "reasoning_message", "reasoning": "think"},
            {
                "message_type": "tool_call_message",
                "tool_call": {"name": "memory_insert", "arguments": "{}", "tool_call_id": "call_srv"},
            },
            {"message_type": "tool_return_message", "tool_return": "ok", "tool_call_id": "call_srv"},
            {"message_type": "assistant_message", "content": "Hello"},
            {"message_type": "assistant_message", "content": [{"type": "text", "text": "again"}]},
        ],
        "end_turn",
    )
    assert pause is None
    assert result.model_dump() == {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 7,
        "model": "coder",
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "logprobs": None,
                "message": {
                    "role": "assistant",
                    "content": "Hello\n\nagain",
                    "refusal": None,
                    "reasoning_content": "think",
                },
            }
        ],
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "total_tokens": 15,
            "prompt_tokens_details": {"cached_tokens": 3},
            "completion_tokens_details": {"reasoning_tokens": 2},
        },
    }


def test_completion_pause() -> None:
    result, pause = completion(
        [{"message_type": "assistant_message", "content": "Reading."}, APPROVAL], "requires_approval"
    )
    assert pause == Pause(
        "run-2125",
        "message-3f4d",
        (PendingCall("call_fake0027", "read_file"), PendingCall("call_fake0028", "list_files")),
    )
    assert result.model_dump()["choices"] == [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "logprobs": None,
            "message": {
                "role": "assistant",
                "content": "Reading.",
                "refusal": None,
                "tool_calls": [
                    {
                        "id": "call_fake0027",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "src/app.py"}'},
                    },
                    {
                        "id": "call_fake0028",
                        "type": "function",
                        "function": {"name": "list_files", "arguments": '{"dir": "lib"}'},
                    },
                ],
            },
        }
    ]


def test_pause_on_server_tool_only_is_a_conflict() -> None:
    with pytest.raises(Conflict) as info:
        completion([APPROVAL], "requires_approval", names=frozenset({"other"}))
    assert info.value.code == "server_tool_approval_required"


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        ("end_turn", "stop"),
        ("requires_approval", "tool_calls"),
        ("max_steps", "length"),
        ("max_tokens_exceeded", "length"),
        ("no_tool_call", "stop"),
        ("tool_rule", "stop"),
        ("future_reason", "stop"),
    ],
)
def test_finish_reason(stop: str, expected: str) -> None:
    assert finish_reason(stop) == expected


@pytest.mark.parametrize(
    "stop", ["error", "llm_api_error", "invalid_llm_response", "cancelled", "insufficient_credits"]
)
def test_error_stop_reasons_raise(stop: str) -> None:
    with pytest.raises(AgentError) as info:
        finish_reason(stop)
    assert info.value.status_code == 502 and stop in info.value.message


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (None, None),
        (
            {
                "prompt_tokens": 4,
                "completion_tokens": 6,
                "total_tokens": None,
                "cached_input_tokens": None,
                "reasoning_tokens": None,
            },
            CompletionUsage(prompt_tokens=4, completion_tokens=6, total_tokens=10),
        ),
    ],
)
def test_usage(usage: dict[str, Any] | None, expected: CompletionUsage | None) -> None:
    assert usage_from_letta(usage) == expected


def stream_of(events: list[dict[str, Any]], names: frozenset[str] = frozenset({"read_file", "list_files"})):
    translator = StreamTranslator(
        completion_id="chatcmpl-s", created=1, model="coder", tool_names=names, include_usage=True
    )
    out: list[Any] = []
    for event in events:
        out.extend(x if x is KEEPALIVE else x.model_dump() for x in translator.feed(event))
    reason, pause = translator.outcome()
    out.extend(c.model_dump() for c in translator.closing(reason))
    return out, pause


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "coder",
        "system_fingerprint": None,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }


USAGE_CHUNK = {
    "id": "chatcmpl-s",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "coder",
    "system_fingerprint": None,
    "choices": [],
    "usage": {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 3},
        "completion_tokens_details": {"reasoning_tokens": 2},
    },
}


def test_stream_token_mode_parallel_tool_calls() -> None:
    def frag(call_id: str, name: str | None, args: str | None) -> dict[str, Any]:
        delta = {"name": name, "arguments": args, "tool_call_id": call_id}
        return {
            "id": "message-21b0",
            "message_type": "approval_request_message",
            "run_id": "run-ed96",
            "tool_call": delta,
            "tool_calls": delta,
        }

    out, pause = stream_of(
        [
            {"message_type": "ping", "run_id": "run-ed96"},
            {"message_type": "reasoning_message", "reasoning": "plan", "id": "m0"},
            frag("call_15", "read_file", None),
            frag("call_15", None, '{"path":'),
            frag("call_15", None, ' "a"}'),
            frag("call_16", "list_files", None),
            frag("call_16", None, '{"dir": "docs"}'),
            {"message_type": "stop_reason", "stop_reason": "requires_approval"},
            USAGE,
        ]
    )
    assert out == [
        KEEPALIVE,
        chunk({"content": "", "reasoning_content": "plan"}),
        chunk(
            {
                "content": "",
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_15",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": ""},
                    }
                ],
            }
        ),
        chunk({"content": "", "tool_calls": [{"index": 0, "function": {"arguments": '{"path":'}}]}),
        chunk({"content": "", "tool_calls": [{"index": 0, "function": {"arguments": ' "a"}'}}]}),
        chunk(
            {
                "content": "",
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "call_16",
                        "type": "function",
                        "function": {"name": "list_files", "arguments": ""},
                    }
                ],
            }
        ),
        chunk({"content": "", "tool_calls": [{"index": 1, "function": {"arguments": '{"dir": "docs"}'}}]}),
        chunk({"content": ""}, "tool_calls"),
        USAGE_CHUNK,
    ]
    assert pause == Pause(
        "run-ed96", "message-21b0", (PendingCall("call_15", "read_file"), PendingCall("call_16", "list_files"))
    )


def test_stream_step_mode_and_text() -> None:
    out, pause = stream_of(
        [
            {"message_type": "ping", "run_id": "run-1"},
            {"message_type": "tool_return_message", "run_id": "run-1", "tool_return": "x"},
            {"message_type": "assistant_message", "id": "m1", "content": "Done."},
            {"message_type": "assistant_message", "id": "m1", "content": " Really"},
            {"message_type": "assistant_message", "id": "m2", "content": "Second"},
            {"message_type": "stop_reason", "stop_reason": "end_turn"},
            USAGE,
        ]
    )
    assert pause is None
    assert out == [
        KEEPALIVE,
        chunk({"content": "Done."}),
        chunk({"content": " Really"}),
        chunk({"content": "\n\nSecond"}),
        chunk({"content": ""}, "stop"),
        USAGE_CHUNK,
    ]


def test_stream_step_mode_tool_calls_list() -> None:
    out, pause = stream_of([APPROVAL, {"message_type": "stop_reason", "stop_reason": "requires_approval"}])
    assert out[0] == chunk(
        {
            "content": "",
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_fake0027",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "src/app.py"}'},
                },
                {
                    "index": 1,
                    "id": "call_fake0028",
                    "type": "function",
                    "function": {"name": "list_files", "arguments": '{"dir": "lib"}'},
                },
            ],
        }
    )
    assert pause is not None and [c.id for c in pause.calls] == ["call_fake0027", "call_fake0028"]


def test_stream_error_event_raises() -> None:
    translator = StreamTranslator(completion_id="c", created=1, model="m", tool_names=frozenset())
    with pytest.raises(AgentError):
        translator.feed({"message_type": "error_message", "error_type": "llm_error", "message": "boom", "run_id": "r"})


def test_stream_without_stop_reason_is_an_upstream_error() -> None:
    translator = StreamTranslator(completion_id="c", created=1, model="m", tool_names=frozenset())
    translator.feed({"message_type": "assistant_message", "content": "partial"})
    with pytest.raises(Exception) as info:
        translator.outcome()
    assert getattr(info.value, "status_code", None) == 502


def test_otids_are_deterministic_per_logical_request() -> None:
    turn = TurnInput(tool_results=(ToolResult("a", "A"),), user_messages=({"role": "user", "content": "u"},))
    first, again, other = (letta_messages(turn, otid_seed=s) for s in ("seed-1", "seed-1", "seed-2"))
    assert first == again and [m["otid"] for m in first] != [m["otid"] for m in other]
    assert len({m["otid"] for m in first}) == 2 and all(m["otid"].startswith("message-") for m in first)
    assert "otid" not in letta_messages(turn)[0]


def test_an_empty_turn_is_never_sent_empty() -> None:
    result, _ = completion([{"message_type": "tool_call_message", "tool_call": {"name": "memory_insert"}}], "end_turn")
    assert result.choices[0].message.content == "(The agent finished its turn without a reply.)"
    translator = StreamTranslator(completion_id="c", created=1, model="m", tool_names=frozenset())
    translator.feed({"message_type": "stop_reason", "stop_reason": "end_turn"})
    reason, _ = translator.outcome()
    texts = [c.choices[0].delta.content for c in translator.closing(reason)]
    assert texts == ["(The agent finished its turn without a reply.)", ""]


def test_reasoning_alias() -> None:
    result, _ = completion_from_letta(
        {
            "messages": [
                {"message_type": "reasoning_message", "reasoning": "hmm"},
                {"message_type": "assistant_message", "content": "ok"},
            ],
            "stop_reason": {"stop_reason": "end_turn"},
        },
        completion_id="c",
        created=1,
        model="m",
        tool_names=frozenset(),
        reasoning_alias=True,
    )
    message = result.model_dump()["choices"][0]["message"]
    assert message["reasoning_content"] == message["reasoning"] == "hmm"
    translator = StreamTranslator(completion_id="c", created=1, model="m", tool_names=frozenset(), reasoning_alias=True)
    [chunk] = translator.feed({"message_type": "reasoning_message", "reasoning": "hmm"})
    assert chunk.model_dump()["choices"][0]["delta"] == {"content": "", "reasoning_content": "hmm", "reasoning": "hmm"}

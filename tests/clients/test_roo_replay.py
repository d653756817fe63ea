"""Roo Code's requests replayed byte-for-byte in shape against the gateway and the Letta double, and its answers
read the way Roo's "OpenAI Compatible" provider reads them (src/api/providers/openai.ts: `delta.content`,
`delta.reasoning_content`, `delta.tool_calls` by index, `finish_reason`, `usage`).

The request shape is Roo 3.52.1's: its system prompt (a ~40 KB string here), its 13 code-mode tools
(data/roo-code-tools.json, the exact `tools` value, copied from shared/clients), `tool_choice: "auto"`,
`parallel_tool_calls: true`, `stream: true`, `stream_options: {include_usage: true}`, `temperature: 0`, its default
headers; tool results come back as `role: "tool"` messages followed by a separate user message holding
`<environment_details>` (Roo's convertToOpenAiMessages).

Not covered here (not implemented yet, issue 7 items 2-3): a tool call in every turn (Roo rejects text-only turns:
"[ERROR] You did not use a tool…"), condense and prompt-enhancement side requests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import ALICE
from tests.support.letta_double import LettaDouble

ROO_TOOLS: list[dict[str, Any]] = json.loads((Path(__file__).parent / "data" / "roo-code-tools.json").read_text())
TOOL_SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in ROO_TOOLS}
ROO_HEADERS = {  # Roo's DEFAULT_HEADERS (src/api/providers/constants.ts), sent on every request
    "HTTP-Referer": "https://github.com/RooVetGit/Roo-Cline",
    "X-Title": "Roo Code",
    "User-Agent": "RooCode/3.52.1",
}
READ_ARGS = {
    "path": "src/app.py",
    "mode": "slice",
    "offset": 1,
    "limit": 2000,
    "indentation": {
        "anchor_line": 1,
        "max_levels": 0,
        "include_siblings": False,
        "include_header": True,
        "max_lines": 2000,
    },
}
LIST_ARGS = {"path": "src", "recursive": False}


def system_prompt() -> str:
    """A Roo-sized system prompt (~40 KB): role, markdown rules, tool use, capabilities, modes, rules, system info."""
    sections = [
        "You are Roo, a highly skilled software engineer with extensive knowledge in many programming languages, "
        "frameworks, design patterns, and best practices.",
        "====\n\nMARKDOWN RULES\n\nALL responses MUST show ANY `language construct` OR filename reference as "
        "clickable, exactly as [`filename OR language.declaration()`](relative/file/path.ext:line).",
        "====\n\nTOOL USE\n\nYou have access to a set of tools that are executed upon the user's approval. Use the "
        "provider-native tool-calling mechanism. Do not include XML markup or examples. You must call at least one "
        "tool per assistant response.",
        "====\n\nCAPABILITIES\n\n- You have access to tools that let you execute CLI commands on the user's "
        "computer, list files, view source code definitions, regex search, read and write files, and ask follow-up "
        "questions.",
        '====\n\nMODES\n\n- These are the currently available modes:\n  * "💻 Code" mode (code)\n  * "🏗️ '
        'Architect" mode (architect)\n  * "❓ Ask" mode (ask)\n  * "🪲 Debug" mode (debug)',
    ]
    rules = ["====\n\nRULES\n"]
    n = 0
    while sum(map(len, sections)) + sum(map(len, rules)) < 40_000:
        n += 1
        rules.append(
            f"- Rule {n}: the project base directory is /home/dev/project; all file paths must be relative to it. "
            "Prefer the most specific tool for the job, wait for the result of each tool use before the next one, "
            "and never assume the outcome of a tool use without seeing it."
        )
    sections.append("\n".join(rules))
    sections.append(
        "====\n\nSYSTEM INFORMATION\n\nOperating System: Linux 6.1\nDefault Shell: /bin/bash\nHome Directory: "
        "/home/dev\nCurrent Workspace Directory: /home/dev/project"
    )
    return "\n\n".join(sections)


SYSTEM_PROMPT = system_prompt()


def environment_details(visible: str) -> str:
    return (
        "<environment_details>\n# VSCode Visible Files\n"
        f"{visible}\n\n# VSCode Open Tabs\n{visible}\n\n# Current Time\nCurrent time in ISO 8601 UTC format: "
        "2026-11-25T21:31:32.000Z\nUser time zone: UTC, UTC+0:00\n\n# Current Cost\n$0.00\n\n# Current Mode\n"
        "<slug>code</slug>\n<name>💻 Code</name>\n<model>coder</model>\n\n"
        "# Current Workspace Directory (/home/dev/project) Files\nREADME.md\nsrc/\nsrc/app.py\n</environment_details>"
    )


def first_user_message(task: str) -> dict[str, Any]:
    """Roo's first message of a task: the task, then the environment details, as two text blocks."""
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": f"<task>\n{task}\n</task>"},
            {"type": "text", "text": environment_details("src/app.py")},
        ],
    }


def roo_request(model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The body Roo's OpenAiHandler.createMessage sends (key order as Roo builds it)."""
    return {
        "model": model,
        "temperature": 0,
        "messages": [{"role": "system", "content": SYSTEM_PROMPT}, *messages],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": ROO_TOOLS,
        "tool_choice": "auto",
        "parallel_tool_calls": True,
    }


@dataclass
class RooTurn:
    """An answer as Roo reads it, plus the wire facts Roo (and the OpenAI-compatible readers) depend on."""

    content: str = ""
    reasoning: str = ""
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reasons: list[str] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    payloads: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False

    def tool_calls(self) -> list[dict[str, Any]]:
        return [self.calls[i] for i in sorted(self.calls)]


def roo_turn(gateway_url: str, body: dict[str, Any]) -> RooTurn:
    headers = {"Authorization": f"Bearer {ALICE}", **ROO_HEADERS}
    turn = RooTurn()
    with httpx.stream("POST", f"{gateway_url}/v1/chat/completions", json=body, headers=headers, timeout=30) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                turn.done = True
                continue
            assert not turn.done, "data after [DONE]"
            payload = json.loads(data)
            assert "error" not in payload, payload
            turn.payloads.append(payload)
            read_chunk(turn, payload)
    return turn


def read_chunk(turn: RooTurn, chunk: dict[str, Any]) -> None:
    """Roo's loop over one chunk (openai.ts createMessage + NativeToolCallParser), asserting what it relies on."""
    assert chunk["object"] == "chat.completion.chunk"
    if chunk.get("usage"):
        turn.usage = chunk["usage"]
    for choice in chunk["choices"]:
        delta = choice["delta"]
        # every delta carries `content` (a string): clients built on the Vercel SDK (Cline) break without it
        assert isinstance(delta.get("content"), str), delta
        turn.content += delta["content"]
        turn.reasoning += delta.get("reasoning_content") or ""
        for piece in delta.get("tool_calls") or ():
            index = piece["index"]
            function = piece.get("function") or {}
            if index not in turn.calls:
                # Roo starts a tool call on the first delta of an index: it needs the id and the name there
                assert piece.get("id") and function.get("name"), piece
                assert piece.get("type", "function") == "function", piece
                turn.calls[index] = {"id": piece["id"], "name": function["name"], "arguments": ""}
            else:
                assert piece.get("id") in (None, turn.calls[index]["id"]), piece
                assert function.get("name") in (None, turn.calls[index]["name"]), piece
            turn.calls[index]["arguments"] += function.get("arguments") or ""
        if choice.get("finish_reason"):
            turn.finish_reasons.append(choice["finish_reason"])


def assert_roo_accepts(turn: RooTurn, finish: str) -> None:
    assert turn.done, "no data: [DONE]"
    assert turn.finish_reasons == [finish]
    assert len({p["id"] for p in turn.payloads}) == 1
    usage_chunks = [p for p in turn.payloads if p.get("usage")]
    assert len(usage_chunks) == 1 and usage_chunks[0]["choices"] == [] and usage_chunks[0] is turn.payloads[-1]
    assert isinstance(turn.usage["prompt_tokens"], int) and isinstance(turn.usage["completion_tokens"], int)
    assert turn.content or turn.calls, "an empty turn: Roo reports it as an error"
    assert turn.calls, "a turn without a tool call: Roo answers '[ERROR] You did not use a tool'"
    calls = turn.tool_calls()
    assert sorted(turn.calls) == list(range(len(calls)))  # indexes 0..n-1
    assert len({c["id"] for c in calls}) == len(calls)
    for call in calls:
        arguments = json.loads(call["arguments"])
        schema = TOOL_SCHEMAS[call["name"]]
        assert set(schema["required"]) <= set(arguments), (call, schema["required"])


def assistant_echo(turn: RooTurn) -> dict[str, Any]:
    """Roo's history entry for the answer, converted back (content "", arguments re-serialised compactly)."""
    return {
        "role": "assistant",
        "content": turn.content,
        "tool_calls": [
            {
                "id": call["id"],
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": json.dumps(json.loads(call["arguments"]), separators=(",", ":")),
                },
            }
            for call in turn.tool_calls()
        ],
    }


def test_roo_task_with_a_tool_round_trip(gateway_url: str, letta: LettaDouble) -> None:
    agent = letta.add_agent("coder")
    # (the double's cue grammar needs something after the call's JSON: the SAY: part is never used in a tool turn)
    task = f"THINK:I should read the file first CALL:read_file {json.dumps(READ_ARGS)} SAY:unused"
    history: list[dict[str, Any]] = [first_user_message(task)]

    paused = roo_turn(gateway_url, roo_request("coder", history))
    assert_roo_accepts(paused, "tool_calls")
    [call] = paused.tool_calls()
    assert call["name"] == "read_file" and json.loads(call["arguments"]) == READ_ARGS
    assert paused.reasoning == "I should read the file first"
    # what reached Letta: only the user's text (no system prompt), the 13 tools as client tools, strict dropped
    [post] = letta.message_posts(agent.id)
    [sent] = post["messages"]
    assert "<task>" in sent["content"] and "<environment_details>" in sent["content"]
    assert SYSTEM_PROMPT[:200] not in json.dumps(post)
    assert post["client_tools"] == [
        {
            "name": t["function"]["name"],
            "description": t["function"]["description"],
            "parameters": t["function"]["parameters"],
        }
        for t in ROO_TOOLS
    ]

    history += [
        assistant_echo(paused),
        {"role": "tool", "tool_call_id": call["id"], "content": "File: src/app.py\n1 | print('hello')"},
        {"role": "user", "content": [{"type": "text", "text": environment_details("src/app.py")}]},
    ]
    answer = roo_turn(gateway_url, roo_request("coder", history))
    assert_roo_accepts(answer, "tool_calls")
    expected = f"Done. Tool results: {call['id']}=File: src/app.py\n1 | print('hello')"
    assert answer.content.startswith(expected)
    [completion] = answer.tool_calls()  # the text-only answer, offered as Roo's attempt_completion
    assert completion["name"] == "attempt_completion"
    assert json.loads(completion["arguments"])["result"].startswith(expected)
    # tool results and the environment details reached Letta together, in one request
    resume = letta.message_posts(agent.id)[-1]["messages"]
    assert [m.get("type") or m.get("role") for m in resume] == ["approval", "user"]
    assert resume[0]["approvals"][0]["tool_call_id"] == call["id"]
    assert "<environment_details>" in json.dumps(resume[1]["content"])


def test_roo_parallel_tool_calls(gateway_url: str, letta: LettaDouble) -> None:
    agent = letta.add_agent("multi", parallel=True)
    task = f"CALL:read_file {json.dumps(READ_ARGS)} CALL:list_files {json.dumps(LIST_ARGS)} SAY:unused"
    history: list[dict[str, Any]] = [first_user_message(task)]

    paused = roo_turn(gateway_url, roo_request("multi", history))
    assert_roo_accepts(paused, "tool_calls")
    calls = paused.tool_calls()
    assert [c["name"] for c in calls] == ["read_file", "list_files"]
    assert json.loads(calls[1]["arguments"]) == LIST_ARGS

    history += [
        assistant_echo(paused),
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": "1 | print('hello')"},
        {"role": "tool", "tool_call_id": calls[1]["id"], "content": "app.py"},
        {"role": "user", "content": [{"type": "text", "text": environment_details("src/app.py")}]},
    ]
    answer = roo_turn(gateway_url, roo_request("multi", history))
    assert_roo_accepts(answer, "tool_calls")
    assert [c["name"] for c in answer.tool_calls()] == ["attempt_completion"]
    assert answer.content.startswith(
        f"Done. Tool results: {calls[0]['id']}=1 | print('hello'); {calls[1]['id']}=app.py"
    )
    assert len(letta.approvals_received(agent.id)) == 1


def test_roo_model_list(gateway_url: str, letta: LettaDouble) -> None:
    """Roo's model picker: GET {base}/models, reading only data[].id."""
    letta.add_agent("coder")
    response = httpx.get(f"{gateway_url}/v1/models", headers={"Authorization": f"Bearer {ALICE}", **ROO_HEADERS})
    assert response.status_code == 200
    assert [m["id"] for m in response.json()["data"]] == ["coder"]

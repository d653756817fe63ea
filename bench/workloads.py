"""The requests the benchmarks send: the same turn as an OpenAI request (through the gateway) and as the Letta
request a direct letta-client caller would make (what the gateway itself sends to Letta).

Two sizes:
- small: one short user message (plain turns carry no tools; pause/resume carry one small tool);
- roo: a Roo Code-sized request: a 40 KB system prompt, Roo's 13 code-mode tools (shared/clients/roo-code-tools.json),
  a user message with ~1 KB of environment details, and on resume the environment details Roo sends after the tool
  result.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ROO_TOOLS_CANDIDATES = (
    os.environ.get("BENCH_ROO_TOOLS", ""),
    str(ROOT.parent / "shared" / "clients" / "roo-code-tools.json"),
    "/work/shared/clients/roo-code-tools.json",
)
GATEWAY_KEY = "sk-bench-0123456789abcdef"
LETTA_KEY = "letta-bench-key"
SYSTEM_PROMPT_BYTES = 40_000

SMALL_TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file from the workspace.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "Path relative to the workspace"}},
            "required": ["path"],
        },
    },
}


def roo_tools() -> list[dict[str, Any]]:
    for candidate in ROO_TOOLS_CANDIDATES:
        if candidate and os.path.isfile(candidate):
            with open(candidate, encoding="utf-8") as fh:
                tools = json.load(fh)
            assert isinstance(tools, list) and len(tools) >= 7, candidate
            return tools
    raise SystemExit("bench: roo-code-tools.json not found (set BENCH_ROO_TOOLS=/path/to/roo-code-tools.json)")


def system_prompt(size: int = SYSTEM_PROMPT_BYTES) -> str:
    """A deterministic Markdown-ish system prompt of exactly `size` bytes (ASCII, with newlines and quotes)."""
    words = (
        "You are Roo, a highly skilled software engineer with extensive knowledge in many programming languages, "
        "frameworks, design patterns, and best practices. ## RULES - The project base directory is `/workspace`. "
        'Use "apply_diff" for surgical edits; never assume a file\'s content before reading it.\n'
    )
    out: list[str] = []
    n = 0
    i = 0
    while n < size:
        line = f"{i:05d}. {words}"
        out.append(line)
        n += len(line)
        i += 1
    return "".join(out)[:size]


def environment_details(tag: str) -> str:
    files = "\n".join(f"src/module_{i:02d}/component_{i:02d}.py" for i in range(24))
    return (
        f"<environment_details>\n# VSCode Visible Files\nsrc/app.py\n\n# Current Time\n2026-11-25T21:31:32Z ({tag})\n"
        f"\n# Current Mode\n<slug>code</slug>\n\n# Current Workspace Directory (/workspace) Files\n{files}\n"
        "</environment_details>"
    )


def letta_client_tools(openai_tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI function tools as Letta client tools (what a direct caller sends; `strict` dropped)."""
    out = []
    for tool in openai_tools:
        fn = tool["function"]
        entry = {"name": fn["name"], "parameters": fn.get("parameters") or {"type": "object", "properties": {}}}
        if fn.get("description") is not None:
            entry["description"] = fn["description"]
        out.append(entry)
    return out


CALL_CUE = 'CALL:read_file {"path": "README.md"}'
TOOL_RESULT = "1 | # Letta OpenAI Gateway\n2 | Put your stateful Letta agents behind the OpenAI API.\n"


@dataclass
class Workload:
    """Builders for one request size."""

    name: str
    system: str | None
    openai_tools: list[dict[str, Any]] | None  # on pause/resume; plain turns carry them only for `roo`
    plain_tools: bool
    env: bool
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def letta_tools(self) -> list[dict[str, Any]]:
        return letta_client_tools(self.openai_tools or [])

    def _user_text(self, text: str, cue: str = "") -> str:
        """The user message; a cue for the double (CALL:/SAY:) always goes last, once."""
        if self.env:
            text = f"<task>\n{text}\n</task>\n{environment_details('turn')}"
        return f"{text} {cue}" if cue else text

    def _head(self) -> list[dict[str, Any]]:
        return [{"role": "system", "content": self.system}] if self.system else []

    def _body(self, model: str, messages: list[dict[str, Any]], tools: bool, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "messages": messages, **self.extra}
        if tools and self.openai_tools:
            body["tools"] = self.openai_tools
            body["tool_choice"] = "auto"
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    # ---- gateway (OpenAI) requests

    def plain_text(self) -> str:
        return self._user_text("Hello there, please summarise what this project does in one sentence.")

    def pause_text(self) -> str:
        return self._user_text("Please read the README first.", CALL_CUE)

    def say_text(self, words: int) -> str:
        return self._user_text("Stream this.", "SAY:" + " ".join(f"word{i:02d}" for i in range(words)))

    def gw_plain(self, model: str, *, stream: bool = False, text: str | None = None) -> dict[str, Any]:
        messages = [*self._head(), {"role": "user", "content": text or self.plain_text()}]
        return self._body(model, messages, self.plain_tools, stream)

    def gw_pause(self, model: str) -> dict[str, Any]:
        return self._body(model, [*self._head(), {"role": "user", "content": self.pause_text()}], True, False)

    def gw_resume(self, model: str, tool_call_id: str) -> dict[str, Any]:
        messages = [
            *self._head(),
            {"role": "user", "content": self.pause_text()},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": tool_call_id,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "README.md"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": tool_call_id, "content": TOOL_RESULT},
        ]
        if self.env:
            messages.append({"role": "user", "content": environment_details("resume")})
        return self._body(model, messages, True, False)

    # ---- direct letta-client requests: exactly what the gateway sends to Letta for the same turn

    def direct_plain(self, text: str | None = None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"messages": [{"role": "user", "content": text or self.plain_text()}]}
        if self.plain_tools and self.openai_tools:
            kwargs["client_tools"] = self.letta_tools
        return kwargs

    def direct_pause(self) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": self.pause_text()}], "client_tools": self.letta_tools}

    def direct_resume(self, tool_call_id: str) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [
            {
                "type": "approval",
                "approvals": [
                    {"type": "tool", "tool_call_id": tool_call_id, "tool_return": TOOL_RESULT, "status": "success"}
                ],
            }
        ]
        if self.env:
            messages.append({"role": "user", "content": environment_details("resume")})
        return {"messages": messages, "client_tools": self.letta_tools}


def small() -> Workload:
    return Workload("small", None, [SMALL_TOOL], plain_tools=False, env=False)


def roo() -> Workload:
    return Workload(
        "roo",
        system_prompt(),
        roo_tools(),
        plain_tools=True,
        env=True,
        extra={"parallel_tool_calls": True, "temperature": 0},
    )


def body_bytes(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()

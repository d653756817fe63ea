"""A Letta 0.16.8 double: the REST shapes recorded from a real server (shared/letta-lab/WIRE.md), driven by cues.

Cues in user text (as the project's scripted model server uses): `CALL:<tool> <json>` (one or more: tool calls in
one step), `THINK:<text>` (a reasoning message first), `THEN:CALL:<tool> <json>` (a second round after the tool
results), `SAY:<text>` (exact answer text). After tool results the agent answers
`Done. Tool results: <id>=<content>; ...`. Faults can be injected per endpoint.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

CALL = re.compile(r"(?<!THEN:)CALL:([A-Za-z0-9_-]+)\s*(\{.*?\})(?=\s*(?:THEN:|CALL:|THINK:|SAY:|$))", re.S)
THEN = re.compile(r"THEN:CALL:([A-Za-z0-9_-]+)\s*(\{.*?\})(?=\s*(?:CALL:|THINK:|SAY:|$))", re.S)
THINK = re.compile(r"THINK:(.*?)(?=\s*(?:CALL:|THEN:|SAY:|$))", re.S)
SAY = re.compile(r"SAY:(.*?)(?=\s*(?:CALL:|THEN:|THINK:|$))", re.S)


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


@dataclass
class Agent:
    id: str
    name: str
    parallel_tool_calls: bool = False
    created_at: str = "2026-11-25T21:31:32+00:00"
    pending: dict[str, Any] | None = None  # the approval_request_message awaiting results
    then: list[tuple[str, str]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    blocks: dict[str, str] = field(default_factory=dict)
    last_returns: list[str] = field(default_factory=list)


@dataclass
class Fault:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class LettaDouble:
    def __init__(self) -> None:
        self.agents: dict[str, Agent] = {}
        self.requests: list[dict[str, Any]] = []  # every message POST: {agent_id, path, headers, body}
        self.faults: list[Fault] = []
        self.keepalive_pings = 0
        self.list_calls = 0
        self.delay = 0.0
        self.next_tool_call_ids: list[str] = []
        self.runs: dict[str, dict[str, Any]] = {}
        self.run_reads = 0
        self.conversations: dict[str, Agent] = {}  # a thread of an agent: its own history and pending approval
        self.deleted_conversations: list[str] = []
        self.blocks: dict[str, dict[str, Any]] = {}
        self.block_writes = 0
        self.stream_fault: str | None = None  # "malformed" | "truncated" | "reset", for the next stream
        self._lock = threading.Lock()
        self._counter = 0
        self.app = Starlette(
            routes=[
                Route("/v1/agents/", self._list_agents, methods=["GET"]),
                Route("/v1/agents/{agent_id}", self._get_agent, methods=["GET"]),
                Route("/v1/agents/{agent_id}/messages", self._messages, methods=["POST"]),
                Route("/v1/agents/{agent_id}/messages/stream", self._messages_stream, methods=["POST"]),
                Route("/v1/blocks/", self._create_block, methods=["POST"]),
                Route(
                    "/v1/agents/{agent_id}/core-memory/blocks/attach/{block_id}", self._attach_block, methods=["PATCH"]
                ),
                Route("/v1/agents/{agent_id}/core-memory/blocks/{label}", self._update_block, methods=["PATCH"]),
                Route("/v1/conversations/", self._create_conversation, methods=["POST"]),
                Route("/v1/conversations/{conversation_id}", self._get_conversation, methods=["GET"]),
                Route("/v1/conversations/{conversation_id}", self._delete_conversation, methods=["DELETE"]),
                Route("/v1/conversations/{conversation_id}/messages", self._conversation_messages, methods=["POST"]),
                Route("/v1/runs/", self._list_runs, methods=["GET"]),
                Route("/v1/runs/{run_id}", self._get_run, methods=["GET"]),
                Route("/v1/runs/{run_id}/messages", self._run_messages, methods=["GET"]),
            ]
        )

    # ----------------------------------------------------------------------------------------- setup

    def reset(self) -> None:
        with self._lock:
            self.agents.clear()
            self.requests.clear()
            self.faults.clear()
            self.keepalive_pings = 0
            self.list_calls = 0
            self.delay = 0.0
            self.next_tool_call_ids.clear()
            self.runs.clear()
            self.run_reads = 0
            self.conversations.clear()
            self.deleted_conversations.clear()
            self.blocks.clear()
            self.block_writes = 0
            self.stream_fault = None

    def add_agent(self, name: str, *, parallel: bool = False, agent_id: str | None = None) -> Agent:
        agent = Agent(id=agent_id or _id("agent"), name=name, parallel_tool_calls=parallel)
        self.agents[agent.id] = agent
        return agent

    def fail_next(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self.faults.append(Fault(status, body, headers or {}))

    def message_posts(self, agent_id: str | None = None) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests if agent_id is None or r["agent_id"] == agent_id]

    def approvals_received(self, agent_id: str) -> list[dict[str, Any]]:
        out = []
        for body in self.message_posts(agent_id):
            out.extend(m for m in body.get("messages", []) if m.get("type") == "approval")
        return out

    # ----------------------------------------------------------------------------------------- routes

    async def _list_agents(self, request: Request) -> Response:
        self.list_calls += 1
        name = request.query_params.get("name")
        limit = int(request.query_params.get("limit") or 50)
        after = request.query_params.get("after")
        agents = [a for a in self.agents.values() if name is None or a.name == name]
        if after:
            ids = [a.id for a in agents]
            agents = agents[ids.index(after) + 1 :] if after in ids else []
        return JSONResponse([self._agent_state(a) for a in agents[:limit]])

    async def _list_runs(self, request: Request) -> Response:
        agent_id = request.query_params.get("agent_id")
        conversation_id = request.query_params.get("conversation_id")
        limit = int(request.query_params.get("limit") or 50)
        runs = [
            r
            for r in self.runs.values()
            if (agent_id is None or r["agent_id"] == agent_id)
            and (conversation_id is None or r.get("conversation_id") == conversation_id)
        ]
        if request.query_params.get("order", "desc") == "desc":
            runs = runs[::-1]
        return JSONResponse([{k: v for k, v in r.items() if k != "messages"} for r in runs[:limit]])

    async def _create_block(self, request: Request) -> Response:
        body = await request.json()
        block_id = _id("block")
        self.blocks[block_id] = {
            "id": block_id,
            "label": body["label"],
            "value": body["value"],
            "limit": body.get("limit"),
        }
        self.block_writes += 1
        return JSONResponse(self.blocks[block_id])

    async def _attach_block(self, request: Request) -> Response:
        agent = self.agents.get(request.path_params["agent_id"])
        block = self.blocks.get(request.path_params["block_id"])
        if agent is None or block is None:
            return JSONResponse({"detail": "Not found"}, status_code=404)
        agent.blocks[block["label"]] = block["value"]
        return JSONResponse(self._agent_state(agent))

    async def _update_block(self, request: Request) -> Response:
        agent = self.agents.get(request.path_params["agent_id"])
        label = request.path_params["label"]
        if agent is None or label not in agent.blocks:
            return JSONResponse({"detail": f"Block with label {label} not found"}, status_code=404)
        agent.blocks[label] = (await request.json())["value"]
        self.block_writes += 1
        return JSONResponse({"label": label, "value": agent.blocks[label]})

    async def _create_conversation(self, request: Request) -> Response:
        agent = self.agents.get(request.query_params.get("agent_id", ""))
        if agent is None:
            return JSONResponse({"detail": "Agent not found"}, status_code=404)
        conversation_id = _id("conv")
        self.conversations[conversation_id] = Agent(
            id=agent.id, name=agent.name, parallel_tool_calls=agent.parallel_tool_calls
        )
        return JSONResponse(
            {"id": conversation_id, "agent_id": agent.id, "summary": (await request.json() or {}).get("summary")}
        )

    async def _get_conversation(self, request: Request) -> Response:
        thread = self.conversations.get(request.path_params["conversation_id"])
        if thread is None:
            return JSONResponse({"detail": "Conversation not found"}, status_code=404)
        return JSONResponse({"id": request.path_params["conversation_id"], "agent_id": thread.id})

    async def _delete_conversation(self, request: Request) -> Response:
        if self.conversations.pop(request.path_params["conversation_id"], None) is None:
            return JSONResponse({"detail": "Conversation not found"}, status_code=404)
        self.deleted_conversations.append(request.path_params["conversation_id"])
        return JSONResponse({})

    async def _conversation_messages(self, request: Request) -> Response:
        body = await request.json()
        if body.get("streaming", True):  # conversations stream by default
            return await self._stream(request, body)
        return await self._respond(request, body)

    async def _get_run(self, request: Request) -> Response:
        run = self.runs.get(request.path_params["run_id"])
        if run is None:
            return JSONResponse({"detail": "Run not found"}, status_code=404)
        self.run_reads += 1
        return JSONResponse({k: v for k, v in run.items() if k != "messages"})

    async def _run_messages(self, request: Request) -> Response:
        run = self.runs.get(request.path_params["run_id"])
        if run is None:
            return JSONResponse({"detail": "Run not found"}, status_code=404)
        self.run_reads += 1
        return JSONResponse(run["messages"])

    async def _get_agent(self, request: Request) -> Response:
        agent = self.agents.get(request.path_params["agent_id"])
        if agent is None:
            return JSONResponse({"detail": f"Agent {request.path_params['agent_id']} not found"}, status_code=404)
        return JSONResponse(self._agent_state(agent))

    @staticmethod
    def _agent_state(agent: Agent) -> dict[str, Any]:
        return {
            "id": agent.id,
            "name": agent.name,
            "created_at": agent.created_at,
            "agent_type": "letta_v1_agent",
            "llm_config": {"parallel_tool_calls": agent.parallel_tool_calls},
            "pending_approval": agent.pending,
        }

    async def _messages(self, request: Request) -> Response:
        body = await request.json()
        if body.get("streaming"):
            if "x-stainless-package-version" not in request.headers:
                return JSONResponse({"detail": "streaming=true is only supported for SDK v1.0+ clients."}, 422)
            return await self._stream(request, body)
        return await self._respond(request, body)

    async def _messages_stream(self, request: Request) -> Response:
        return await self._stream(request, await request.json())

    def _thread_of(self, request: Request) -> tuple[str | None, str | None]:
        """(agent id, conversation id) a message request is for."""
        conversation_id = request.path_params.get("conversation_id")
        if conversation_id is None:
            return request.path_params["agent_id"], None
        thread = self.conversations.get(conversation_id)
        return (thread.id if thread else None), conversation_id

    def _record(self, request: Request, body: dict[str, Any]) -> Fault | None:
        agent_id, conversation_id = self._thread_of(request)
        with self._lock:
            self.requests.append(
                {
                    "agent_id": agent_id,
                    "conversation_id": conversation_id,
                    "path": request.url.path,
                    "headers": dict(request.headers),
                    "body": body,
                }
            )
            return self.faults.pop(0) if self.faults else None

    async def _respond(self, request: Request, body: dict[str, Any]) -> Response:
        fault = self._record(request, body)
        if fault is not None:
            return JSONResponse(fault.body, status_code=fault.status, headers=fault.headers)
        if self.delay:
            await asyncio.sleep(self.delay)
        outcome = self._turn(*self._thread_of(request), body)
        if isinstance(outcome, Response):
            return outcome
        messages, stop = outcome
        return JSONResponse(
            {
                "messages": messages,
                "stop_reason": {"message_type": "stop_reason", "stop_reason": stop},
                "usage": self._usage(),
                "logprobs": None,
                "turns": None,
            }
        )

    async def _stream(self, request: Request, body: dict[str, Any]) -> Response:
        fault = self._record(request, body)
        if fault is not None:
            return JSONResponse(fault.body, status_code=fault.status, headers=fault.headers)
        outcome = self._turn(*self._thread_of(request), body)
        if isinstance(outcome, Response):
            return outcome
        messages, stop = outcome
        token_mode = bool(body.get("stream_tokens"))
        fault, self.stream_fault = self.stream_fault, None
        run_id = messages[0]["run_id"] if messages else _id("run")
        delay = self.delay

        async def events() -> Any:
            if body.get("include_pings", True):
                yield self._sse(
                    {"id": _id("ping"), "date": "2026-11-25T21:31:32+00:00", "message_type": "ping", "run_id": run_id}
                )
            if fault == "malformed":
                yield b"data: {this is not json\n\n"
            if fault == "reset":
                raise ConnectionResetError("connection reset by the double")
            for message in messages:
                for event in self._token_events(message) if token_mode else [message]:
                    if delay:
                        await asyncio.sleep(delay)
                    yield self._sse(event)
            if fault == "truncated":
                return
            yield self._sse({"message_type": "stop_reason", "stop_reason": stop})
            yield self._sse(self._usage())
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @staticmethod
    def _sse(event: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(event).encode() + b"\n\n"

    @staticmethod
    def _token_events(message: dict[str, Any]) -> list[dict[str, Any]]:
        kind = message["message_type"]
        if kind == "assistant_message":
            words = message["content"].split(" ")
            return [{**message, "content": w if i == 0 else " " + w} for i, w in enumerate(words)]
        if kind == "approval_request_message":
            out = []
            for call in message["tool_calls"]:
                args = call["arguments"]
                half = len(args) // 2
                first = {"name": call["name"], "arguments": None, "tool_call_id": call["tool_call_id"]}
                out.append({**message, "tool_call": first, "tool_calls": first})
                for fragment in (args[:half], args[half:]):
                    delta = {"name": None, "arguments": fragment, "tool_call_id": call["tool_call_id"]}
                    out.append({**message, "tool_call": delta, "tool_calls": delta})
            return out
        return [message]

    @staticmethod
    def _usage() -> dict[str, Any]:
        return {
            "message_type": "usage_statistics",
            "completion_tokens": 5,
            "prompt_tokens": 10,
            "total_tokens": 15,
            "step_count": 1,
            "run_ids": None,
            "cached_input_tokens": 0,
            "cache_write_tokens": 0,
            "reasoning_tokens": 0,
            "context_tokens": 15,
        }

    # ----------------------------------------------------------------------------------------- the agent

    def _turn(
        self, agent_id: str | None, conversation_id: str | None, body: dict[str, Any]
    ) -> tuple[list[dict[str, Any]], str] | Response:
        with self._lock:
            agent = self.conversations.get(conversation_id) if conversation_id else self.agents.get(agent_id or "")
            if agent is None:
                return JSONResponse({"detail": f"Agent {agent_id} not found"}, status_code=404)
            tools = {t["name"] for t in body.get("client_tools") or ()}
            run_id = _id("run")
            out: list[dict[str, Any]] = []
            user_texts: list[str] = []
            for message in body.get("messages") or ():
                if message.get("type") == "approval":
                    error = self._apply_approval(agent, message, run_id, out)
                    if error is not None:
                        return error
                elif message.get("role") == "user":
                    if agent.pending is not None and conversation_id is not None:
                        return JSONResponse(
                            {
                                "detail": "CONFLICT: Cannot send a new message: The agent is waiting "
                                "for approval on a tool call."
                            },
                            status_code=409,
                        )
                    if agent.pending is not None:
                        return JSONResponse(
                            {
                                "detail": {
                                    "code": "PENDING_APPROVAL",
                                    "message": "CONFLICT: Cannot send a new message: The agent is waiting for "
                                    "approval on a tool call. Please approve or deny the pending "
                                    "request before continuing.",
                                    "pending_request_id": agent.pending["id"],
                                }
                            },
                            status_code=409,
                        )
                    content = message["content"]
                    text = content if isinstance(content, str) else " ".join(p.get("text", "[image]") for p in content)
                    user_texts.append(text)
                    agent.history.append({"role": "user", "content": content})
            messages, stop = self._act(agent, run_id, out, user_texts, tools)
            return self._finish_run(agent, run_id, body, messages, stop, conversation_id)

    def _apply_approval(
        self, agent: Agent, message: dict[str, Any], run_id: str, out: list[dict[str, Any]]
    ) -> Response | None:
        approvals = message.get("approvals") or []
        if not approvals:
            return JSONResponse(
                {"detail": "Invalid approval response. Approval response message does not contain any approvals."},
                status_code=400,
            )
        given = [a["tool_call_id"] for a in approvals]
        if agent.pending is None:
            if sorted(given) == sorted(agent.last_returns):
                self.keepalive_pings += 1
                return None
            return JSONResponse(
                {"detail": "Cannot process approval response: No tool call is currently awaiting approval."},
                status_code=400,
            )
        expected = [c["tool_call_id"] for c in agent.pending["tool_calls"]]
        if sorted(given) != sorted(expected):
            return JSONResponse(
                {"detail": f"Invalid tool call IDs. Expected '{expected}', but received '{given}'."}, status_code=400
            )
        returns = []
        for a in approvals:
            if a.get("type") == "approval" and a.get("approve") is False:
                ret = f"Error: request to call tool denied. User reason: {a.get('reason')}"
                returns.append(
                    {
                        "type": "tool",
                        "tool_return": ret,
                        "status": "error",
                        "tool_call_id": a["tool_call_id"],
                        "stdout": None,
                        "stderr": None,
                    }
                )
            else:
                returns.append(
                    {
                        "type": "tool",
                        "tool_return": a.get("tool_return"),
                        "status": a.get("status"),
                        "tool_call_id": a["tool_call_id"],
                        "stdout": None,
                        "stderr": None,
                    }
                )
        out.append(
            {
                "id": _id("message"),
                "message_type": "tool_return_message",
                "run_id": run_id,
                "step_id": agent.pending["step_id"],
                "tool_return": returns[0]["tool_return"],
                "status": returns[0]["status"],
                "tool_call_id": returns[0]["tool_call_id"],
                "stdout": None,
                "stderr": None,
                "tool_returns": returns,
            }
        )
        agent.history.append({"role": "tool", "returns": returns})
        agent.last_returns = given
        agent.pending = None
        self._results = returns
        return None

    def _call_id(self, i: int) -> str:
        if self.next_tool_call_ids:
            return self.next_tool_call_ids.pop(0)
        return f"call_fake{self._counter:04d}_{i}"

    def _finish_run(
        self,
        agent: Agent,
        run_id: str,
        body: dict[str, Any],
        out: list[dict[str, Any]],
        stop: str,
        conversation_id: str | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        echoed = []
        for message in body.get("messages") or ():
            if message.get("type") == "approval":
                echoed.append(
                    {
                        "id": _id("message"),
                        "message_type": "approval_response_message",
                        "run_id": run_id,
                        "approvals": message.get("approvals"),
                    }
                )
            elif message.get("role") == "user":
                echoed.append(
                    {
                        "id": _id("message"),
                        "message_type": "user_message",
                        "run_id": run_id,
                        "content": message.get("content"),
                    }
                )
        self.runs[run_id] = {
            "id": run_id,
            "agent_id": agent.id,
            "status": "completed",
            "stop_reason": stop,
            "background": False,
            "conversation_id": conversation_id,
            "messages": echoed + out,
        }
        return out, stop

    def _act(
        self, agent: Agent, run_id: str, out: list[dict[str, Any]], user_texts: list[str], tools: set[str]
    ) -> tuple[list[dict[str, Any]], str]:
        text = " ".join(user_texts)
        step = _id("step")
        for thought in THINK.findall(text):
            out.append(
                {
                    "id": _id("message"),
                    "message_type": "reasoning_message",
                    "run_id": run_id,
                    "step_id": step,
                    "reasoning": thought.strip(),
                    "source": "reasoner_model",
                    "signature": None,
                }
            )
        calls = [(n, a) for n, a in CALL.findall(text)]
        agent.then.extend(THEN.findall(text))
        if not calls and not text and agent.then and out and out[-1]["message_type"] == "tool_return_message":
            calls = [agent.then.pop(0)]
        if calls:
            if not agent.parallel_tool_calls:
                calls = calls[:1]
            client = [(n, a) for n, a in calls if n in tools]
            if client:
                self._counter += 1
                tool_calls = [
                    {"name": n, "arguments": a, "tool_call_id": self._call_id(i)} for i, (n, a) in enumerate(client)
                ]
                message = {
                    "id": _id("message"),
                    "date": "2026-11-25T21:31:32+00:00",
                    "name": None,
                    "message_type": "approval_request_message",
                    "otid": None,
                    "sender_id": None,
                    "step_id": step,
                    "is_err": None,
                    "seq_id": None,
                    "run_id": run_id,
                    "tool_call": tool_calls[0],
                    "tool_calls": tool_calls,
                }
                agent.pending = message
                out.append(message)
                return out, "requires_approval"
            name = calls[0][0]
            out.append(
                {
                    "id": _id("message"),
                    "message_type": "tool_call_message",
                    "run_id": run_id,
                    "tool_call": {"name": name, "arguments": calls[0][1], "tool_call_id": "call_server"},
                }
            )
            out.append(
                {
                    "id": _id("message"),
                    "message_type": "tool_return_message",
                    "run_id": run_id,
                    "tool_return": f"[ToolConstraintError] Cannot call {name}",
                    "status": "error",
                    "tool_call_id": "call_server",
                }
            )
        said = SAY.findall(text)
        if said:
            answer = said[0].strip()
        elif out and out[0]["message_type"] == "tool_return_message":
            results = "; ".join(f"{r['tool_call_id']}={r['tool_return']}" for r in out[0]["tool_returns"])
            answer = f"Done. Tool results: {results}"
            if text:
                answer += f" And you said: {text}"
        else:
            answer = "Hello from the Letta double: you said " + " ".join(text.split()[:6])
        out.append(
            {
                "id": _id("message"),
                "date": "2026-11-25T21:31:33+00:00",
                "message_type": "assistant_message",
                "run_id": run_id,
                "step_id": step,
                "content": answer,
                "name": None,
                "otid": None,
            }
        )
        return out, "end_turn"

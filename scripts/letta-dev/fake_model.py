#!/usr/bin/env python3
"""A small deterministic OpenAI-compatible chat model for end-to-end tests (stdlib only).

    python3 fake_model.py --port 8399 [--host 127.0.0.1] [--model-id fake-model] [--request-log FILE]

Routes: GET /v1/models, POST /v1/chat/completions (streamed as SSE when "stream": true, else JSON).
Every chat-completions request body is appended to the request log as one JSON line.

Behaviour is scripted by cues in the latest genuine user message (see README.md):
    CALL:<tool> {json args}       one tool call per occurrence, all in one step (in order)
    THEN:CALL:<tool> {json args}  second round: called after the first round's tool results come back
    THINK:<text>                  reasoning, sent as the completion's `reasoning_content`
    SAY:<text>                    answer with exactly <text>
After tool results (and no further round due): "Done. Tool results: <tool_call_id>=<content>; ...".
Otherwise: "Hello from the scripted model: you said <first words of the user text>".
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import secrets
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_MODEL_ID = "fake-model"

_CUE_RE = re.compile(r"THEN:CALL:|CALL:|THINK:|SAY:")
_TOOL_NAME_RE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.\-]*)")
_counter = itertools.count(1)
_counter_lock = threading.Lock()


def _next_id(prefix: str) -> str:
    with _counter_lock:
        n = next(_counter)
    return f"{prefix}_{n:04d}_{secrets.token_hex(4)}"


# --------------------------------------------------------------------------------------------
# reading what Letta sends


def _text_of(content: Any) -> str:
    """Message content as plain text: a string, or the text parts of a content-part list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return str(content)


def _unwrap_user_text(text: str) -> str:
    """Letta's older agents send user turns as JSON ({"type": "user_message", "message": ...});
    letta_v1_agent sends plain text. Accept both."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            obj = json.loads(stripped)
        except ValueError:
            return text
        if isinstance(obj, dict):
            for key in ("message", "text", "content"):
                if isinstance(obj.get(key), str):
                    return obj[key]
    return text


def _is_synthetic_user(text: str) -> bool:
    """User-role messages Letta injects itself (keep-alive pings, heartbeats, system alerts)."""
    s = text.strip()
    if s.startswith("<system-alert>") or s.startswith("<system_alert>"):
        return True
    if s.startswith("{"):
        try:
            obj = json.loads(s)
        except ValueError:
            return False
        if isinstance(obj, dict) and obj.get("type") in ("heartbeat", "system_alert", "login"):
            return True
    return False


def parse_cues(text: str) -> dict[str, Any]:
    """Split a user message into cues. Free text between cues is ignored except as SAY/THINK payload."""
    cues: dict[str, Any] = {"calls": [], "then_calls": [], "think": None, "say": None, "errors": []}
    matches = list(_CUE_RE.finditer(text))
    for i, m in enumerate(matches):
        kind = m.group(0)
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        body = text[m.end():end]
        if kind in ("CALL:", "THEN:CALL:"):
            call = _parse_call(body)
            if call is None:
                cues["errors"].append(f"could not parse {kind}{body.strip()[:60]}")
                continue
            cues["calls" if kind == "CALL:" else "then_calls"].append(call)
        elif kind == "THINK:":
            cues["think"] = ((cues["think"] + " ") if cues["think"] else "") + body.strip()
        elif kind == "SAY:":
            cues["say"] = body.strip()
    return cues


def _parse_call(body: str) -> dict[str, str] | None:
    m = _TOOL_NAME_RE.match(body)
    if not m:
        return None
    name = m.group(1)
    rest = body[m.end():].lstrip()
    args: Any = {}
    if rest.startswith("{"):
        try:
            args, _ = json.JSONDecoder().raw_decode(rest)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return {"name": name, "arguments": json.dumps(args)}


def _tool_names(req: dict[str, Any]) -> list[str]:
    names = []
    for tool in req.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        if isinstance(fn.get("name"), str):
            names.append(fn["name"])
    return names


def plan_reply(req: dict[str, Any]) -> dict[str, Any]:
    """Decide the next completion: {"content": str|None, "reasoning": str|None, "tool_calls": [...]}."""
    messages = [m for m in (req.get("messages") or []) if isinstance(m, dict)]
    available = set(_tool_names(req)) if req.get("tool_choice") != "none" else set()

    # latest genuine user message (skip Letta's own injected pings/alerts)
    u_idx, user_text = -1, ""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.get("role") != "user":
            continue
        text = _unwrap_user_text(_text_of(m.get("content")))
        if _is_synthetic_user(text):
            continue
        u_idx, user_text = i, text
        break
    cues = parse_cues(user_text)
    after = messages[u_idx + 1:] if u_idx >= 0 else messages
    rounds_done = sum(1 for m in after if m.get("role") == "assistant" and m.get("tool_calls"))
    answered = any(m.get("role") == "assistant" and not m.get("tool_calls") and _text_of(m.get("content")).strip()
                   for m in after)

    # tool results that follow the latest assistant tool-call message (the round just answered) ...
    trailing_results: list[tuple[str, str]] = []
    last_call_idx = max((i for i, m in enumerate(after) if m.get("role") == "assistant" and m.get("tool_calls")),
                        default=-1)
    if last_call_idx >= 0:
        for m in after[last_call_idx + 1:]:
            if m.get("role") == "tool":
                trailing_results.append((str(m.get("tool_call_id")), _text_of(m.get("content"))))
    # ... and every tool result of this turn, all rounds, for the final answer
    all_results = [(str(m.get("tool_call_id")), _text_of(m.get("content"))) for m in after if m.get("role") == "tool"]

    def calls(specs: list[dict[str, str]]) -> tuple[list[dict[str, Any]], list[str]]:
        out, missing = [], []
        for spec in specs:
            if spec["name"] not in available:
                missing.append(spec["name"])
                continue
            out.append({"id": _next_id("call"), "type": "function",
                        "function": {"name": spec["name"], "arguments": spec["arguments"]}})
        return out, missing

    def unavailable(missing: list[str]) -> str:
        return f"I cannot call {', '.join(missing)}: not in the tools offered to me ({', '.join(sorted(available))})."

    if rounds_done == 0 and not answered:
        if cues["calls"]:
            tcs, missing = calls(cues["calls"])
            if tcs:
                return {"content": None, "reasoning": cues["think"], "tool_calls": tcs}
            return {"content": unavailable(missing), "reasoning": cues["think"], "tool_calls": []}
        if cues["say"] is not None:
            return {"content": cues["say"], "reasoning": cues["think"], "tool_calls": []}
        words = user_text.split()
        snippet = " ".join(words[:8]) if words else "nothing"
        return {"content": f"Hello from the scripted model: you said {snippet}",
                "reasoning": cues["think"], "tool_calls": []}

    if rounds_done == 1 and not answered and cues["then_calls"] and trailing_results:
        tcs, missing = calls(cues["then_calls"])
        if tcs:
            return {"content": None, "reasoning": None, "tool_calls": tcs}
        return {"content": unavailable(missing), "reasoning": None, "tool_calls": []}

    if trailing_results and not answered:
        joined = "; ".join(f"{tcid}={content}" for tcid, content in all_results)
        return {"content": f"Done. Tool results: {joined}", "reasoning": None, "tool_calls": []}

    return {"content": "Nothing more to do: the last request is already answered.", "reasoning": None,
            "tool_calls": []}


# --------------------------------------------------------------------------------------------
# building responses


def _count_tokens(req: dict[str, Any]) -> int:
    total = 0
    for m in req.get("messages") or []:
        if isinstance(m, dict):
            total += len(_text_of(m.get("content")).split()) + 4
    return max(total, 1)


def _usage(req: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    completion = len((reply.get("content") or "").split()) + len((reply.get("reasoning") or "").split())
    for tc in reply["tool_calls"]:
        completion += 3 + len(tc["function"]["arguments"]) // 4
    prompt = _count_tokens(req)
    completion = max(completion, 1)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion_json(req: dict[str, Any], reply: dict[str, Any], model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply["content"]}
    if reply.get("reasoning"):
        message["reasoning_content"] = reply["reasoning"]
    if reply["tool_calls"]:
        message["tool_calls"] = reply["tool_calls"]
    return {
        "id": _next_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if reply["tool_calls"] else "stop"}],
        "usage": _usage(req, reply),
    }


def _words(text: str) -> list[str]:
    """One chunk per word; every chunk after the first carries its leading space."""
    parts = text.split(" ")
    return [p if i == 0 else " " + p for i, p in enumerate(parts)]


def _fragments(arguments: str, n: int = 3) -> list[str]:
    if len(arguments) < n:
        return [arguments]
    size = -(-len(arguments) // n)
    return [arguments[i:i + size] for i in range(0, len(arguments), size)]


def stream_chunks(req: dict[str, Any], reply: dict[str, Any], model: str) -> list[dict[str, Any]]:
    cid = _next_id("chatcmpl")
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    if reply.get("reasoning"):
        out += [chunk({"reasoning_content": w}) for w in _words(reply["reasoning"])]
    if reply.get("content"):
        out += [chunk({"content": w}) for w in _words(reply["content"])]
    for index, tc in enumerate(reply["tool_calls"]):
        out.append(chunk({"tool_calls": [{"index": index, "id": tc["id"], "type": "function",
                                          "function": {"name": tc["function"]["name"], "arguments": ""}}]}))
        for frag in _fragments(tc["function"]["arguments"]):
            out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": frag}}]}))
    out.append(chunk({}, "tool_calls" if reply["tool_calls"] else "stop"))
    if (req.get("stream_options") or {}).get("include_usage"):
        last = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [], "usage": _usage(req, reply)}
        out.append(last)
    return out


# --------------------------------------------------------------------------------------------
# HTTP


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "letta-dev-fake-model/1"
    model_id = DEFAULT_MODEL_ID
    request_log: str | None = None
    keep_alive = False
    log_lock = threading.Lock()

    def log_message(self, fmt: str, *args: Any) -> None:  # one line per request on stderr
        sys.stderr.write(f"{time.strftime('%H:%M:%S')} {self.address_string()} {fmt % args}\n")

    def _connection_header(self) -> None:
        # One request per connection unless --keep-alive: with pooled keep-alive connections, Letta
        # 0.16.8's LLM client closes them in a way that can unregister a *new* socket that reused the
        # same fd from its event loop; the next DB connect then hangs until asyncpg's 60 s timeout.
        if not self.keep_alive:
            self.send_header("Connection", "close")
            self.close_connection = True

    def _send_json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self._connection_header()
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            self._send_json(200, {"object": "list", "data": [
                {"id": self.model_id, "object": "model", "created": 1700000000, "owned_by": "letta-dev"}]})
        elif path in ("", "/health", "/v1/health"):
            self._send_json(200, {"status": "ok"})
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        try:
            req = json.loads(raw or b"{}")
            if not isinstance(req, dict):
                raise ValueError("body is not an object")
        except ValueError as exc:
            self._send_json(400, {"error": {"message": f"bad JSON body: {exc}", "type": "invalid_request_error"}})
            return
        self._log_request(req)
        reply = plan_reply(req)
        model = req.get("model") or self.model_id
        if req.get("stream"):
            self._stream(req, reply, model)
        else:
            self._send_json(200, completion_json(req, reply, model))

    def _log_request(self, req: dict[str, Any]) -> None:
        if not self.request_log:
            return
        line = json.dumps(req, separators=(",", ":")) + "\n"
        with self.log_lock, open(self.request_log, "a", encoding="utf-8") as fh:
            fh.write(line)

    def _stream(self, req: dict[str, Any], reply: dict[str, Any], model: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self._connection_header()
        self.end_headers()

        def write(payload: str) -> None:
            data = payload.encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        try:
            for ch in stream_chunks(req, reply, model):
                write(f"data: {json.dumps(ch)}\n\n")
            write("data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="deterministic OpenAI-compatible model server for tests")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=int(os.environ.get("FAKE_MODEL_PORT", "0") or 0))
    ap.add_argument("--model-id", default=os.environ.get("FAKE_MODEL_ID", DEFAULT_MODEL_ID))
    ap.add_argument("--request-log", default=os.environ.get("FAKE_MODEL_REQUEST_LOG"))
    ap.add_argument("--keep-alive", action="store_true",
                    help="keep HTTP/1.1 connections open between requests (default: close after each)")
    args = ap.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        ap.error("this server only binds to loopback")
    _Handler.model_id = args.model_id
    _Handler.request_log = args.request_log
    _Handler.keep_alive = args.keep_alive
    server = ThreadingHTTPServer((args.host, args.port), _Handler)
    server.daemon_threads = True
    print(f"fake model {args.model_id!r} on http://{args.host}:{server.server_address[1]}/v1 "
          f"(request log: {args.request_log})", file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

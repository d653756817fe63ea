"""The throughput baselines: a bare FastAPI endpoint that forwards the request body, unchanged, to the same Letta
double and returns Letta's answer. No auth, no validation, no translation, no logging: this stack's practical limit
for one proxied call. Two variants of the upstream client, chosen by FORWARDER_CLIENT when the module is imported:

- `httpx` (default): one shared httpx.AsyncClient (max 256 connections). The spec's "bare forwarder": uvicorn +
  FastAPI + httpx, the baseline of the throughput target.
- `aiohttp`: one shared aiohttp.ClientSession with a TCPConnector(limit=256), created lazily on the running loop.
  The same stack as the gateway's own Letta transport (uvicorn + FastAPI + aiohttp): the floor for its overhead.

Route: POST /forward/{agent_id} -> POST {LETTA_BASE_URL}/v1/agents/{agent_id}/messages; GET /health.
Environment: LETTA_BASE_URL (the double), FORWARDER_CLIENT (httpx | aiohttp). Run: uvicorn forwarder:app (bench/ on
the path), one worker.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import httpx
from fastapi import FastAPI, Request, Response

if TYPE_CHECKING:
    import aiohttp

LETTA_BASE_URL = os.environ["LETTA_BASE_URL"].rstrip("/")
CLIENT = (os.environ.get("FORWARDER_CLIENT") or "httpx").strip().lower()
if CLIENT not in ("httpx", "aiohttp"):
    raise RuntimeError(f"FORWARDER_CLIENT must be httpx or aiohttp, got {CLIENT!r}")
app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
_client: httpx.AsyncClient | None = None
_session: aiohttp.ClientSession | None = None


def client() -> httpx.AsyncClient:
    global _client
    if _client is None:
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
        _client = httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=10.0), limits=limits)
    return _client


def session() -> aiohttp.ClientSession:
    """The aiohttp session, made on first use: a ClientSession binds to the running event loop."""
    global _session
    if _session is None:
        import aiohttp

        _session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=256), timeout=aiohttp.ClientTimeout(total=60.0, connect=10.0)
        )
    return _session


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


async def forward(agent_id: str, request: Request) -> Response:
    body = await request.body()
    upstream = await client().post(
        f"{LETTA_BASE_URL}/v1/agents/{agent_id}/messages", content=body, headers={"content-type": "application/json"}
    )
    return Response(upstream.content, status_code=upstream.status_code, media_type="application/json")


async def forward_aiohttp(agent_id: str, request: Request) -> Response:
    body = await request.body()
    async with session().post(
        f"{LETTA_BASE_URL}/v1/agents/{agent_id}/messages", data=body, headers={"content-type": "application/json"}
    ) as upstream:
        content = await upstream.read()
    return Response(content, status_code=upstream.status, media_type="application/json")


app.add_api_route("/forward/{agent_id}", forward_aiohttp if CLIENT == "aiohttp" else forward, methods=["POST"])

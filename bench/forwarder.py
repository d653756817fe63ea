"""The throughput baseline: a bare FastAPI endpoint that forwards the request body, unchanged, to the same Letta
double with one shared httpx.AsyncClient and returns Letta's answer. No auth, no validation, no translation, no
logging: this stack's (uvicorn + FastAPI + httpx) practical limit for one proxied call.

Route: POST /forward/{agent_id} -> POST {LETTA_BASE_URL}/v1/agents/{agent_id}/messages.
Environment: LETTA_BASE_URL (the double). Run: uvicorn forwarder:app (bench/ on the path), one worker.
"""

from __future__ import annotations

import os

import httpx
from fastapi import FastAPI, Request, Response

LETTA_BASE_URL = os.environ["LETTA_BASE_URL"].rstrip("/")
app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
_client: httpx.AsyncClient | None = None


def client() -> httpx.AsyncClient:
    global _client
    if _client is None:
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
        _client = httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=10.0), limits=limits)
    return _client


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/forward/{agent_id}")
async def forward(agent_id: str, request: Request) -> Response:
    body = await request.body()
    upstream = await client().post(
        f"{LETTA_BASE_URL}/v1/agents/{agent_id}/messages", content=body, headers={"content-type": "application/json"}
    )
    return Response(upstream.content, status_code=upstream.status_code, media_type="application/json")

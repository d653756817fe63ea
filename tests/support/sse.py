"""Reading a gateway SSE response on the wire, with arrival times."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx


def stream_lines(url: str, body: dict[str, Any], key: str, timeout: float = 120) -> list[tuple[float, str]]:
    """Every non-empty SSE line of a streamed chat completion, with seconds since the request started."""
    started = time.monotonic()
    out: list[tuple[float, str]] = []
    with httpx.stream(
        "POST",
        f"{url}/v1/chat/completions",
        json={**body, "stream": True},
        headers={"Authorization": f"Bearer {key}"},
        timeout=timeout,
    ) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line:
                out.append((time.monotonic() - started, line))
    return out


def payloads(lines: list[tuple[float, str]]) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for _, line in lines if line.startswith("data: {")]

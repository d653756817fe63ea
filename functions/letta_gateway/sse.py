"""Server-sent events framing: the one place that writes `data:` lines."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keepalive\n\n"


def event(payload: BaseModel | dict[str, Any]) -> bytes:
    if isinstance(payload, BaseModel):
        body = payload.model_dump_json().encode()
    else:
        body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    return b"data: " + body + b"\n\n"

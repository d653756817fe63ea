"""The cold-start floor: the smallest Lambda module on the gateway's stack — FastAPI behind Mangum with one route
taking a pydantic body, nothing else imported. No gateway can start faster on this stack; the gap between it and
the gateway's handler is what the gateway's own code costs."""

from fastapi import FastAPI
from mangum import Mangum
from pydantic import BaseModel


class ChatRequest(BaseModel):
    model: str
    messages: list[dict]


app = FastAPI(title="floor")


@app.post("/v1/chat/completions")
async def chat(body: ChatRequest) -> dict[str, str]:
    return {"model": body.model}


handler = Mangum(app, lifespan="off")

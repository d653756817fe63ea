"""The cold-start baseline: a naive Lambda module that imports every dependency eagerly at module level and builds
its app (FastAPI behind Mangum, a Powertools logger), the way a first version of such a function usually looks.
It answers nothing useful; only its import cost matters."""

import boto3  # noqa: F401
import httpx  # noqa: F401
import letta_client  # noqa: F401
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities import parameters  # noqa: F401
from fastapi import FastAPI
from letta_client import AsyncLetta  # noqa: F401
from mangum import Mangum
from pydantic import BaseModel

logger = Logger(service="naive-gateway")


class ChatRequest(BaseModel):
    model: str
    messages: list[dict]


app = FastAPI(title="naive")


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/v1/chat/completions")
async def chat(body: ChatRequest) -> dict[str, str]:
    return {"model": body.model}


handler = Mangum(app, lifespan="off")

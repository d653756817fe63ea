"""ASGI entry for uvicorn (`letta-gateway serve`, `uvicorn letta_gateway.asgi:app`)."""

from .bootstrap import build_app

app = build_app()

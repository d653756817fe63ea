"""A real Letta 0.16.8 server (scripts/letta-dev: Postgres, Redis, the scripted model) and the gateway served by
uvicorn in separate processes, driven by the official openai SDK."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "letta-dev"))

import letta_dev  # noqa: E402

KEY = "sk-e2e-" + uuid.uuid4().hex
OTHER_KEY = "sk-e2e-other-" + uuid.uuid4().hex


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def stack() -> Iterator[dict[str, Any]]:
    components = letta_dev.status().get("components") or {}
    was_running = bool(components) and all(c.get("up") for c in components.values())
    started = time.monotonic()
    letta_dev.install()
    info = letta_dev.up()
    print(f"\nletta-dev stack ready in {time.monotonic() - started:.1f} s at {info['letta_base_url']}")
    yield info
    if not was_running and not os.environ.get("LETTA_DEV_KEEP"):
        letta_dev.down()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class GatewayProcess:
    """`letta-gateway serve` in its own process, as a user runs it."""

    def __init__(self, letta_url: str, state_path: Path, log_path: Path, transport: str) -> None:
        self.transport = transport
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT / "functions"),
            "LETTA_BASE_URL": letta_url,
            "GATEWAY_API_KEYS": f"{KEY},{OTHER_KEY}",
            "GATEWAY_STATE_PATH": str(state_path),
            "GATEWAY_MODEL_CACHE_SECONDS": "1",
            "LETTA_HTTP_CLIENT": transport,
        }
        env.pop("GATEWAY_STATE_TABLE", None)
        self.log = log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "letta_gateway.cli", "serve", "--port", str(self.port)],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gateway did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture(scope="session")
def state_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gateway-state") / "state.sqlite3"


@pytest.fixture(scope="session")
def gateways(stack: dict[str, Any], state_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """Two gateway processes that share nothing but the state store; the second calls Letta over httpx, the
    transport of the Lambda layer, the first over aiohttp (the default where installed)."""
    logs = tmp_path_factory.mktemp("gateway-logs")
    first = GatewayProcess(stack["letta_base_url"], state_path, logs / "first.log", "aiohttp")
    second = GatewayProcess(stack["letta_base_url"], state_path, logs / "second.log", "httpx")
    yield first, second
    first.stop()
    second.stop()
    for log in (logs / "first.log", logs / "second.log"):
        text = log.read_text(errors="replace")
        assert KEY not in text and OTHER_KEY not in text, "a gateway key reached the logs"


@pytest.fixture
def gateway_url(gateways: tuple[GatewayProcess, GatewayProcess]) -> str:
    return gateways[0].url


@pytest.fixture
def client(gateway_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=KEY, max_retries=0, timeout=120) as c:
        yield c


@pytest.fixture
def make_agent(stack: dict[str, Any]) -> Callable[..., dict[str, Any]]:
    def create(parallel: bool = False) -> dict[str, Any]:
        name = f"e2e-{uuid.uuid4().hex[:10]}"
        return letta_dev.create_agent(stack["letta_base_url"], name, parallel=parallel)

    return create


@pytest.fixture
def model_calls(stack: dict[str, Any]) -> Callable[[], int]:
    """How many chat-completion calls the scripted model has received so far."""
    return lambda: len(letta_dev.model_requests(stack))

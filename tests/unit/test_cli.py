"""`letta-gateway serve` runs the gateway with uvicorn, as the README's quick start does."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai

from tests.support.letta_double import LettaDouble

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_runs_the_gateway(letta_url: str, letta: LettaDouble, tmp_path: Path) -> None:
    letta.add_agent("coder")
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "functions"),
        "LETTA_BASE_URL": letta_url,
        "GATEWAY_API_KEYS": "sk-cli-test",
        "GATEWAY_STATE_PATH": str(tmp_path / "state.sqlite3"),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "letta_gateway.cli", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "gateway did not start"
            time.sleep(0.1)
        with openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-cli-test", max_retries=0) as c:
            assert [m.id for m in c.models.list().data] == ["coder"]
            reply = c.chat.completions.create(model="coder", messages=[{"role": "user", "content": "SAY:hi"}])
            assert reply.choices[0].message.content == "hi"
    finally:
        proc.terminate()
        proc.wait(10)


def test_serve_refuses_bad_configuration() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "LETTA_"))}
    env["PYTHONPATH"] = str(ROOT / "functions")
    out = subprocess.run(
        [sys.executable, "-m", "letta_gateway.cli", "serve"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "GATEWAY_API_KEYS" in out.stderr

"""Real client libraries against the gateway (issue 7): fixtures shared by tests/clients.

The Node clients live in tests/clients/node (package.json + package-lock.json, exact versions). Their
node_modules is installed with `npm ci` once per session when it is missing or older than the lockfile; npm and
Node 20+ are required (the tests fail, not skip, without them: CI must run these clients).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from letta_gateway.service import Gateway
from letta_gateway.store.sqlite import SQLiteBackend
from tests.conftest import ALICE, make_gateway

NODE_DIR = Path(__file__).resolve().parent / "node"
LOCKFILE = NODE_DIR / "package-lock.json"
STAMP = NODE_DIR / "node_modules" / ".installed-from-lock.sha256"  # written after a successful npm ci
NPM_CI_TIMEOUT = 300.0
SCRIPT_TIMEOUT = 30.0
MIN_NODE = 20


@pytest.fixture
def gateway_url(serve: Callable[[Gateway], str], letta_url: str, tmp_path: Path) -> str:
    """The gateway on loopback in front of the Letta double; one store (SQLite) is enough for client tests."""
    return serve(make_gateway(letta_url, SQLiteBackend(str(tmp_path / "state.sqlite3"))))


def _lock_digest() -> str:
    return hashlib.sha256(LOCKFILE.read_bytes()).hexdigest()


def _require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(
            f"`{tool}` is not on PATH: tests/clients drive the gateway with real Node client libraries and need "
            f"Node.js {MIN_NODE}+ with npm (Debian: `apt-get install nodejs npm`).",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def node() -> str:
    """The `node` executable, with tests/clients/node/node_modules installed from the lockfile."""
    node = _require("node")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    major = int(version.lstrip("v").split(".")[0] or 0)
    if major < MIN_NODE:
        pytest.fail(f"Node.js {MIN_NODE}+ is needed for tests/clients, found {version}", pytrace=False)
    digest = _lock_digest()
    if not (STAMP.exists() and STAMP.read_text().strip() == digest):
        npm = _require("npm")
        command = [npm, "ci", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error"]
        started = time.monotonic()
        try:
            done = subprocess.run(
                command, cwd=NODE_DIR, capture_output=True, text=True, timeout=NPM_CI_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"`npm ci` in {NODE_DIR} did not finish within {NPM_CI_TIMEOUT:.0f} s", pytrace=False)
        if done.returncode != 0:
            pytest.fail(
                f"`npm ci` in {NODE_DIR} failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}", pytrace=False
            )
        STAMP.write_text(digest + "\n")
        print(f"\nnpm ci (tests/clients/node) took {time.monotonic() - started:.1f} s")
    return node


def run_node(
    node: str,
    script: str,
    scenario: str,
    gateway_url: str,
    model: str,
    key: str = ALICE,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Runs tests/clients/node/<script> <scenario> against the gateway and returns its JSON result line."""
    env = {**os.environ, "GATEWAY_URL": gateway_url, "GATEWAY_KEY": key, "MODEL": model, "NO_COLOR": "1"}
    env.update(extra_env or {})
    try:
        done = subprocess.run(
            [node, script, scenario],
            cwd=NODE_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as timeout:
        pytest.fail(
            f"{script} {scenario} did not finish within {SCRIPT_TIMEOUT:.0f} s:\n{timeout.stdout}\n{timeout.stderr}"
        )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else None
    if done.returncode != 0 or not result or not result.get("ok"):
        detail = json.dumps(result, indent=2) if result else done.stdout
        pytest.fail(f"{script} {scenario} failed (exit {done.returncode}):\n{detail}\nstderr:\n{done.stderr}")
    return result

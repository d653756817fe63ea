"""`make bench`: the gateway's benchmark suite. Prints a table and writes docs/benchmarks.md.

Every figure is measured side by side with its baseline in this one run, repeated (min / median / max over the
repetitions), after a warm-up that is excluded. Targets are printed as PASS / FAIL; they are not test assertions.

Process layout (all servers bind 127.0.0.1 only):
- the Letta double (tests/support/letta_double.py) served by uvicorn in its own process (bench/letta_server.py);
- the gateway served by uvicorn in its own process (`python -m letta_gateway.cli serve`, the `make run` entry);
  when its Letta transport is not httpx already, a second one with LETTA_HTTP_CLIENT=httpx (the AWS Lambda layer's
  transport), measured next to it on plain turns and under load;
- the bare FastAPI forwarder baselines in their own processes (bench/forwarder.py): the httpx one (the spec's
  "bare forwarder", the throughput target's baseline) and the aiohttp one (the gateway's own Letta transport);
- load generators in their own processes (bench/loadgen.py); latency drivers run in this process.

Usage: python bench/run.py [--quick] [--out docs/benchmarks.md] [--skip-profile]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import functools
import importlib
import importlib.metadata as md
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
for p in (str(BENCH), str(ROOT), str(ROOT / "functions")):
    if p not in sys.path:
        sys.path.insert(0, p)

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

import httpx  # noqa: E402
import procs  # noqa: E402
import workloads as wl  # noqa: E402
from procs import Processes, child_env, cpu_seconds, free_port, rss_mb, wait_http  # noqa: E402

# ------------------------------------------------------------------------------------------------ configuration


@dataclass
class Config:
    reps: int = 3
    latency_delay: float = 0.020  # the double's fixed latency per non-streamed turn
    warmup_turns: int = 20  # per (size, kind, path), excluded
    small_plain: int = 150  # per rep and path
    small_cycles: int = 50  # pause+resume cycles per rep and path
    roo_plain: int = 50
    roo_cycles: int = 30
    stream_delay: float = 0.010  # the double's delay before each streamed token event
    stream_words: int = 16
    stream_pairs: int = 20  # per size and rep
    cold_runs: int = 7  # measured fresh processes per variant (plus one warm-up each)
    tput_warmup: float = 1.0
    tput_duration: float = 4.0
    tput_concurrency: int = 32  # the level the target is judged at
    tput_levels: tuple[int, ...] = (8, 32)
    footprint_turns: int = 1000
    ddb_reps: int = 3
    profile_duration: float = 4.0

    @classmethod
    def quick(cls) -> Config:
        return cls(
            reps=3,
            warmup_turns=5,
            small_plain=40,
            small_cycles=15,
            roo_plain=15,
            roo_cycles=10,
            stream_pairs=5,
            cold_runs=5,
            tput_warmup=0.5,
            tput_duration=2.0,
            footprint_turns=200,
            ddb_reps=3,
            profile_duration=2.0,
        )


# ---------------------------------------------------------------------------------------------------- stats


def pct(values: Sequence[float], q: float) -> float:
    """Percentile with linear interpolation (q in 0..100)."""
    if not values:
        return float("nan")
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass
class Spread:
    """min / median / max over repetitions."""

    values: list[float]

    @property
    def med(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    @property
    def lo(self) -> float:
        return min(self.values) if self.values else float("nan")

    @property
    def hi(self) -> float:
        return max(self.values) if self.values else float("nan")

    def fmt(self, digits: int = 2, unit: str = "", sign: bool = False) -> str:
        """`med (lo–hi)`; with `sign` the median carries its sign ("+1.06", "-1.06"), for added / saved amounts."""
        if not self.values:
            return "n/a"
        f = f"{{:.{digits}f}}"
        med = f.format(self.med)
        if sign:
            med = f"{{:+.{digits}f}}".format(self.med if float(med) != 0 else 0.0)  # "+0.00", never "-0.00"
        return f"{med}{unit} ({f.format(self.lo)}–{f.format(self.hi)})"


def sp(values: Sequence[float]) -> Spread:
    return Spread([float(v) for v in values])


@dataclass
class Row:
    section: str
    figure: str
    gateway: str
    baseline: str
    ratio: str
    target: str = ""
    status: str = ""  # PASS / FAIL / info


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    details: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def add(self, *args: Any, **kwargs: Any) -> None:
        self.rows.append(Row(*args, **kwargs))

    def detail(self, section: str, lines: list[str]) -> None:
        self.details.setdefault(section, []).extend(lines)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------------------------------------------ environment

AGENTS = {
    "lat-gw-small": "agent-00000000-0000-4000-8000-000000000001",
    "lat-sdk-small": "agent-00000000-0000-4000-8000-000000000002",
    "lat-raw-small": "agent-00000000-0000-4000-8000-000000000003",
    "lat-gw-roo": "agent-00000000-0000-4000-8000-000000000004",
    "lat-sdk-roo": "agent-00000000-0000-4000-8000-000000000005",
    "lat-raw-roo": "agent-00000000-0000-4000-8000-000000000006",
    "lat-fwd-small": "agent-00000000-0000-4000-8000-00000000000c",
    "lat-cand-small": "agent-00000000-0000-4000-8000-00000000000e",
    "lat-cand-roo": "agent-00000000-0000-4000-8000-00000000000f",
    "stream-cand": "agent-00000000-0000-4000-8000-000000000010",
    "lat-fwd-roo": "agent-00000000-0000-4000-8000-00000000000d",
    "lat-afwd-small": "agent-00000000-0000-4000-8000-000000000011",
    "lat-afwd-roo": "agent-00000000-0000-4000-8000-000000000012",
    "lat-gwx-small": "agent-00000000-0000-4000-8000-000000000013",
    "lat-gwx-roo": "agent-00000000-0000-4000-8000-000000000014",
    "stream-gw": "agent-00000000-0000-4000-8000-000000000007",
    "stream-sdk": "agent-00000000-0000-4000-8000-000000000008",
    "tput": "agent-00000000-0000-4000-8000-000000000009",
    "cold": "agent-00000000-0000-4000-8000-00000000000a",
    "ddb": "agent-00000000-0000-4000-8000-00000000000b",
    **{f"fp-{i}": f"agent-00000000-0000-4000-8000-0000000001{i:02d}" for i in range(8)},
}


class Env:
    """Shared state for a run: temp dir, the processes, the double."""

    def __init__(self, keep: bool) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="letta-bench-"))
        self.keep = keep
        self.out_dir = BENCH / "out"
        self.out_dir.mkdir(exist_ok=True)
        self.procs = Processes(self.tmp)
        self.double_url = ""
        self.double: subprocess.Popen[bytes] | None = None
        self.gateway_url = ""
        self.gateway: subprocess.Popen[bytes] | None = None
        self.forwarder_url = ""
        self.forwarder: subprocess.Popen[bytes] | None = None
        self.aio_forwarder_url = ""
        self.aio_forwarder: subprocess.Popen[bytes] | None = None
        self.candidate_dir = os.environ.get("BENCH_CANDIDATE", "")
        self.candidate_url = ""
        self.candidate: subprocess.Popen[bytes] | None = None
        # the gateway again with LETTA_HTTP_CLIENT=httpx (the Lambda layer has no aiohttp); only started when the
        # default gateway's transport is not httpx already
        self.httpx_gateway_url = ""
        self.httpx_gateway: subprocess.Popen[bytes] | None = None
        # Lambda artifacts built with the repo's Makefiles (see `artifact`): key -> build dir, or why it failed
        self.artifacts: dict[str, Path | str] = {}

    def gateway_env(self, state: str, functions: str = "", **extra_env: str) -> dict[str, str]:
        env = child_env(
            GATEWAY_API_KEYS=wl.GATEWAY_KEY,
            LETTA_BASE_URL=self.double_url,
            LETTA_API_KEY=wl.LETTA_KEY,
            GATEWAY_STATE_PATH=str(self.tmp / f"{state}.sqlite3"),
            GATEWAY_LOG_LEVEL=os.environ.get("BENCH_GATEWAY_LOG_LEVEL", "INFO"),
            **extra_env,
        )
        if functions:
            env["PYTHONPATH"] = os.pathsep.join([functions, env["PYTHONPATH"]])
        return env

    def start_double(self) -> None:
        agents = [{"id": i, "name": n} for n, i in AGENTS.items()]
        path = self.tmp / "agents.json"
        path.write_text(json.dumps(agents))
        port = free_port()
        self.double = self.procs.start(
            "letta-double", [procs.python(), str(BENCH / "letta_server.py"), "--port", str(port), "--agents", str(path)]
        )
        self.double_url = f"http://127.0.0.1:{port}"
        wait_http(f"{self.double_url}/v1/agents/?limit=1", self.double)

    def set_delay(self, delay: float) -> None:
        httpx.post(f"{self.double_url}/_bench/config", json={"delay": delay}, timeout=5).raise_for_status()

    def start_gateway(
        self, name: str = "gateway", cpus: set[int] | None = None, functions: str = "", **extra_env: str
    ) -> tuple[subprocess.Popen[bytes], str]:
        """A gateway process (`letta-gateway serve`); `extra_env` e.g. LETTA_HTTP_CLIENT="httpx"."""
        port = free_port()
        proc = self.procs.start(
            name,
            [procs.python(), "-m", "letta_gateway.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=self.gateway_env(name, functions, **extra_env),
            cpus=cpus,
        )
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/health", proc)
        return proc, url

    def start_forwarder(
        self, name: str = "forwarder", app: str = "forwarder:app", **extra_env: str
    ) -> tuple[subprocess.Popen[bytes], str]:
        """A bare forwarder (bench/forwarder.py) under uvicorn; `extra_env` e.g. FORWARDER_CLIENT="aiohttp"."""
        port = free_port()
        proc = self.procs.start(
            name,
            [
                procs.python(),
                "-m",
                "uvicorn",
                app,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "1",
                "--log-level",
                "warning",
                "--no-access-log",
                "--timeout-keep-alive",
                "75",
            ],
            env=child_env(LETTA_BASE_URL=self.double_url, **extra_env),
        )
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/health", proc)
        return proc, url

    def close(self) -> None:
        self.procs.stop_all()
        if not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)


def pin(pid: int, cpus: set[int] | None) -> None:
    """Set the CPU affinity of every thread of a running process (None: all CPUs)."""
    if procs.cpu_count() < 2:
        return
    target = cpus if cpus is not None else set(range(os.cpu_count() or 1))
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), target)
        except OSError:
            pass


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def uvicorn_stack() -> tuple[str, str]:
    """The event loop and HTTP parser uvicorn's defaults (`loop="auto"`, `http="auto"`) pick in this venv: uvloop
    and httptools when importable, else asyncio and h11. Every server here (the gateway's `serve`, the forwarders,
    the double, the profiled servers) runs uvicorn with those defaults, in this interpreter."""
    return ("uvloop" if _importable("uvloop") else "asyncio"), ("httptools" if _importable("httptools") else "h11")


def gateway_transport() -> str:
    """The HTTP client the gateway's letta-client uses for Letta, by the gateway's own settings rule for the
    environment its server gets (LETTA_HTTP_CLIENT, default auto: aiohttp through httpx-aiohttp when importable and
    no proxy variable is set, else httpx). Gateway code without that setting uses httpx."""
    try:
        from letta_gateway.settings import Settings

        settings = Settings.from_env(
            child_env(GATEWAY_API_KEYS=wl.GATEWAY_KEY, LETTA_BASE_URL="http://127.0.0.1:1", LETTA_API_KEY=wl.LETTA_KEY)
        )
    except Exception as error:
        return f"unknown ({type(error).__name__}: {str(error)[:120]})"
    return str(getattr(settings, "letta_http_client", "httpx"))


def transport_prose() -> str:
    """One sentence for the report: how the gateway and the forwarders reach the double."""
    transport = gateway_transport()
    choice = os.environ.get("LETTA_HTTP_CLIENT") or "auto"
    if transport == "aiohttp":
        how = "letta-client with its aiohttp transport (DefaultAioHttpClient, httpx-aiohttp)"
    elif transport == "httpx":
        how = "letta-client with httpx's own connection pool"
    else:
        how = f"letta-client with a transport the suite could not determine: {transport}"
    return (
        f"The gateway calls the double through {how}, chosen by LETTA_HTTP_CLIENT={choice}; the aiohttp forwarder "
        "uses one aiohttp.ClientSession, the httpx forwarder one httpx.AsyncClient."
    )


SERVER_LABELS = {
    "gateway": "gateway",
    "gateway-httpx": "gateway, httpx transport (the Lambda layer's)",
    "candidate": "candidate",
    "forwarder": "bare forwarder (httpx)",
    "forwarder-aiohttp": "bare forwarder (aiohttp)",
}


# -------------------------------------------------------------------------------------- 1. overhead per turn

Timed = tuple[float, Any]


class Drivers:
    """The three ways to make a turn: through the gateway (httpx), directly with letta-client (SDK models, the
    baseline), and directly with letta-client's raw response + json (what the gateway itself does inside)."""

    def __init__(
        self,
        gateway_url: str,
        double_url: str,
        forwarder_url: str = "",
        candidate_url: str = "",
        aio_forwarder_url: str = "",
        httpx_gateway_url: str = "",
    ) -> None:
        from letta_client import AsyncLetta

        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        self.http = httpx.AsyncClient(
            base_url=gateway_url,
            headers={"Authorization": f"Bearer {wl.GATEWAY_KEY}"},
            timeout=httpx.Timeout(60.0),
            limits=limits,
        )
        self.letta = AsyncLetta(base_url=double_url, api_key=wl.LETTA_KEY, max_retries=0, timeout=60.0)
        self.fwd_http = httpx.AsyncClient(base_url=forwarder_url or gateway_url, timeout=httpx.Timeout(60.0))
        self.afwd_http = httpx.AsyncClient(base_url=aio_forwarder_url or gateway_url, timeout=httpx.Timeout(60.0))
        self.cand_http = httpx.AsyncClient(
            base_url=candidate_url or gateway_url,
            headers={"Authorization": f"Bearer {wl.GATEWAY_KEY}"},
            timeout=httpx.Timeout(60.0),
            limits=limits,
        )
        self.gwx_http = httpx.AsyncClient(
            base_url=httpx_gateway_url or gateway_url,
            headers={"Authorization": f"Bearer {wl.GATEWAY_KEY}"},
            timeout=httpx.Timeout(60.0),
            limits=limits,
        )
        # gateway path name -> its driver client
        self.gateways = {"gateway": self.http, "candidate": self.cand_http, "gateway-httpx": self.gwx_http}

    async def close(self) -> None:
        await self.http.aclose()
        await self.cand_http.aclose()
        await self.gwx_http.aclose()
        await self.fwd_http.aclose()
        await self.afwd_http.aclose()
        await self.letta.close()

    async def fwd(self, agent: str, body: dict[str, Any], aio: bool = False) -> Timed:
        """One turn through the httpx forwarder, or with `aio` through the aiohttp one (same driver client)."""
        t0 = time.perf_counter()
        r = await (self.afwd_http if aio else self.fwd_http).post(f"/forward/{agent}", json=body)
        data = r.json()
        t1 = time.perf_counter()
        if r.status_code != 200:
            raise RuntimeError(f"forwarder answered {r.status_code}: {str(data)[:300]}")
        return t1 - t0, data

    async def gw(self, body: dict[str, Any], path: str = "gateway") -> Timed:
        """One turn through a gateway: `path` is "gateway", "candidate" or "gateway-httpx"."""
        t0 = time.perf_counter()
        r = await self.gateways[path].post("/v1/chat/completions", json=body)
        data = r.json()
        t1 = time.perf_counter()
        if r.status_code != 200:
            raise RuntimeError(f"gateway answered {r.status_code}: {str(data)[:300]}")
        return t1 - t0, data

    async def sdk(self, agent: str, kwargs: dict[str, Any]) -> Timed:
        t0 = time.perf_counter()
        resp = await self.letta.agents.messages.create(agent, **kwargs)
        t1 = time.perf_counter()
        return t1 - t0, resp

    async def raw(self, agent: str, kwargs: dict[str, Any]) -> Timed:
        t0 = time.perf_counter()
        raw = await self.letta.agents.messages.with_raw_response.create(agent, streaming=False, **kwargs)
        data = await raw.json()
        t1 = time.perf_counter()
        return t1 - t0, data


def _gw_call_id(data: dict[str, Any]) -> str:
    choice = data["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    return str(choice["message"]["tool_calls"][0]["id"])


def _gw_stop(data: dict[str, Any], expect: str = "") -> None:
    """A finished answer: plain text (`stop`), or, when the request offered the gateway's completion tool (Roo's
    `attempt_completion`), the same text as a synthetic call of that tool (`tool_calls`, id `call_lgwdone_…`)."""
    choice = data["choices"][0]
    message = choice["message"]
    text = message.get("content") or ""
    if choice["finish_reason"] != "stop":
        calls = message.get("tool_calls") or []
        assert choice["finish_reason"] == "tool_calls" and len(calls) == 1, choice
        assert str(calls[0]["id"]).startswith("call_lgwdone_"), choice
        text = text or str(calls[0]["function"]["arguments"])
    assert expect in text, choice


def _sdk_call_id(resp: Any) -> str:
    assert resp.stop_reason.stop_reason == "requires_approval", resp.stop_reason
    for m in resp.messages:
        if m.message_type == "approval_request_message":
            calls = m.tool_calls if isinstance(m.tool_calls, list) else [m.tool_call]
            return str(calls[0].tool_call_id)
    raise AssertionError("no approval request")


def _sse_call_id(text: str) -> str:
    for line in text.splitlines():
        if line.startswith("data:") and "tool_calls" in line:
            payload = json.loads(line[5:])
            for choice in payload.get("choices") or ():
                for call in choice.get("delta", {}).get("tool_calls") or ():
                    if call.get("id"):
                        return str(call["id"])
    raise AssertionError("no tool call in the stream")


def _raw_call_id(data: dict[str, Any]) -> str:
    assert data["stop_reason"]["stop_reason"] == "requires_approval", data["stop_reason"]
    for m in data["messages"]:
        if m["message_type"] == "approval_request_message":
            return str(m["tool_calls"][0]["tool_call_id"])
    raise AssertionError("no approval request")


PATH_LABELS = {
    "candidate": "gateway with the proposed patch (BENCH_CANDIDATE)",
    "gateway": "gateway (httpx → uvicorn → letta-client → double)",
    "gateway-httpx": "gateway, LETTA_HTTP_CLIENT=httpx (the Lambda layer's transport)",
    "sdk": "direct: letta-client `create()` (baseline)",
    "raw": "direct: letta-client raw response + json",
    "forwarder": "bare FastAPI + httpx forwarder (stack floor)",
    "forwarder-aiohttp": "bare FastAPI + aiohttp forwarder (the gateway's transport)",
}
# the bare forwarders (plain turns only): the httpx one is the spec's baseline, the aiohttp one the gateway's stack
FORWARDERS = ("forwarder", "forwarder-aiohttp")
# paths measured on plain turns only (no pause / resume cycles): the forwarders and the httpx-transport gateway
PLAIN_ONLY = (*FORWARDERS, "gateway-httpx")
GATEWAYS = ("gateway", "candidate", "gateway-httpx")


def rotate(paths: Sequence[str], i: int) -> tuple[str, ...]:
    k = i % len(paths)
    return (*paths[k:], *paths[:k])


async def overhead_phase(env: Env, cfg: Config, report: Report) -> None:
    env.set_delay(cfg.latency_delay)
    d = Drivers(
        env.gateway_url,
        env.double_url,
        env.forwarder_url,
        env.candidate_url,
        env.aio_forwarder_url,
        env.httpx_gateway_url,
    )
    sizes = {"small": wl.small(), "roo": wl.roo()}
    kinds = ("plain", "pause", "resume")
    PATHS: tuple[str, ...] = ("gateway", "sdk", "raw", *(("candidate",) if env.candidate_url else ()))
    PLAIN_PATHS = (
        *PATHS,
        *(("gateway-httpx",) if env.httpx_gateway is not None else ()),
        "forwarder",
        *(("forwarder-aiohttp",) if env.aio_forwarder is not None else ()),
    )
    # samples[size][kind][path] -> one list of seconds per repetition
    samples: dict[str, dict[str, dict[str, list[list[float]]]]] = {
        s: {k: {p: [] for p in (PLAIN_PATHS if k == "plain" else PATHS)} for k in kinds} for s in sizes
    }
    body_sizes: dict[str, dict[str, int]] = {}
    assert env.gateway is not None and env.forwarder is not None
    servers = {"gateway": env.gateway.pid}
    if env.httpx_gateway is not None:
        servers["gateway-httpx"] = env.httpx_gateway.pid
    servers["forwarder"] = env.forwarder.pid
    if env.aio_forwarder is not None:
        servers["forwarder-aiohttp"] = env.aio_forwarder.pid
    if env.candidate is not None:
        servers["candidate"] = env.candidate.pid
    # server CPU ms per plain turn / per pause+resume cycle, one value per repetition
    cpu_turn: dict[str, dict[str, dict[str, list[float]]]] = {
        s: {k: {n: [] for n in servers} for k in ("plain", "pause+resume")} for s in sizes
    }

    async def measure_size(size: str, w: wl.Workload) -> None:
        short = {
            "gateway": "gw",
            "gateway-httpx": "gwx",
            "forwarder": "fwd",
            "forwarder-aiohttp": "afwd",
            "candidate": "cand",
        }
        agent = {p: AGENTS[f"lat-{short.get(p, p)}-{size}"] for p in PLAIN_PATHS}
        gw_plain_body = w.gw_plain(agent["gateway"])
        body_sizes[size] = {
            "plain": len(wl.body_bytes(gw_plain_body)),
            "pause": len(wl.body_bytes(w.gw_pause(agent["gateway"]))),
            "resume": len(wl.body_bytes(w.gw_resume(agent["gateway"], "call_fake0000_0"))),
        }
        direct_plain = w.direct_plain()
        gw_plain_bodies = {p: gw_plain_body if p == "gateway" else w.gw_plain(agent[p]) for p in GATEWAYS if p in agent}

        async def plain(path: str) -> float:
            if path in GATEWAYS:
                t, data = await d.gw(gw_plain_bodies[path], path)
                _gw_stop(data, "Hello from the Letta double")
            elif path == "sdk":
                t, resp = await d.sdk(agent["sdk"], direct_plain)
                assert resp.stop_reason.stop_reason == "end_turn"
            elif path == "raw":
                t, data = await d.raw(agent["raw"], direct_plain)
                assert data["stop_reason"]["stop_reason"] == "end_turn"
            else:
                t, data = await d.fwd(agent[path], gw_plain_body, aio=path == "forwarder-aiohttp")
                assert data["stop_reason"]["stop_reason"] == "end_turn"
            return t

        async def pause(path: str) -> tuple[float, str]:
            if path in GATEWAYS:
                t, data = await d.gw(w.gw_pause(agent[path]), path)
                return t, _gw_call_id(data)
            if path == "sdk":
                t, resp = await d.sdk(agent["sdk"], w.direct_pause())
                return t, _sdk_call_id(resp)
            t, data = await d.raw(agent["raw"], w.direct_pause())
            return t, _raw_call_id(data)

        async def resume(path: str, call_id: str) -> float:
            if path in GATEWAYS:
                t, data = await d.gw(w.gw_resume(agent[path], call_id), path)
                _gw_stop(data, "Done. Tool results")
            elif path == "sdk":
                t, resp = await d.sdk(agent["sdk"], w.direct_resume(call_id))
                assert resp.stop_reason.stop_reason == "end_turn"
            else:
                t, data = await d.raw(agent["raw"], w.direct_resume(call_id))
                assert data["stop_reason"]["stop_reason"] == "end_turn"
            return t

        def server_cpu() -> dict[str, float]:
            return {name: cpu_seconds(pid) for name, pid in servers.items()}

        async def block(
            n_plain: int, n_cycles: int, into: dict[str, dict[str, list[float]]] | None
        ) -> dict[str, dict[str, float]]:
            """Runs the turns; returns the servers' CPU seconds spent on the plain part and on the cycles."""
            c0 = server_cpu()
            for i in range(n_plain):
                for path in rotate(PLAIN_PATHS, i):
                    t = await plain(path)
                    if into is not None:
                        into["plain"][path].append(t)
            c1 = server_cpu()
            for i in range(n_cycles):
                order = rotate(PATHS, i)
                ids = {}
                for path in order:
                    t, ids[path] = await pause(path)
                    if into is not None:
                        into["pause"][path].append(t)
                for path in order:
                    t = await resume(path, ids[path])
                    if into is not None:
                        into["resume"][path].append(t)
            c2 = server_cpu()
            return {
                "plain": {k: c1[k] - c0[k] for k in c0},
                "cycle": {k: c2[k] - c1[k] for k in c0},
            }

        n_plain, n_cycles = (cfg.small_plain, cfg.small_cycles) if size == "small" else (cfg.roo_plain, cfg.roo_cycles)
        log(f"overhead/{size}: warm-up")
        await block(cfg.warmup_turns, max(2, cfg.warmup_turns // 2), None)
        for rep in range(cfg.reps):
            into = {k: {p: [] for p in samples[size][k]} for k in kinds}
            t0 = time.perf_counter()
            used = await block(n_plain, n_cycles, into)
            log(f"overhead/{size}: rep {rep + 1}/{cfg.reps} in {time.perf_counter() - t0:.1f}s")
            for name in servers:
                cpu_turn[size]["plain"][name].append(used["plain"][name] * 1000 / n_plain)
                if name not in PLAIN_ONLY and n_cycles:
                    cpu_turn[size]["pause+resume"][name].append(used["cycle"][name] * 1000 / n_cycles)
            for kind in kinds:
                for path, values in into[kind].items():
                    samples[size][kind][path].append(values)

    try:
        for size, w in sizes.items():
            await measure_size(size, w)
    finally:
        await d.close()

    lines = [
        f"The double answers each non-streamed turn after a fixed {cfg.latency_delay * 1000:.0f} ms. Per repetition "
        f"and path: small {cfg.small_plain} plain turns and {cfg.small_cycles} pause+resume cycles; Roo-sized "
        f"{cfg.roo_plain} plain turns and {cfg.roo_cycles} cycles. Paths are interleaved turn by turn in rotating "
        f"order, each on its own agent. Warm-up excluded: {cfg.warmup_turns} plain turns and "
        f"{max(2, cfg.warmup_turns // 2)} cycles per path and size. The gateway runs in its own process "
        "(`letta-gateway serve`, one uvicorn worker, default INFO JSON logs to a file), the double in another; "
        "the drivers run in the benchmark process. No CPU pinning.",
        "",
        "OpenAI request body sizes: "
        + "; ".join(f"{s}: " + ", ".join(f"{k} {v:,} B" for k, v in b.items()) for s, b in body_sizes.items()),
        "",
        "| size | turn | path | p50 ms | p99 ms | added p50 ms | added p99 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in sizes:
        for kind in kinds:
            per = samples[size][kind]
            base = per["sdk"]
            p50 = {p: sp([pct(r, 50) * 1000 for r in v]) for p, v in per.items()}
            p99 = {p: sp([pct(r, 99) * 1000 for r in v]) for p, v in per.items()}
            add50 = {
                p: sp([(pct(g, 50) - pct(b, 50)) * 1000 for g, b in zip(v, base, strict=True)]) for p, v in per.items()
            }
            add99 = {
                p: sp([(pct(g, 99) - pct(b, 99)) * 1000 for g, b in zip(v, base, strict=True)]) for p, v in per.items()
            }
            ratio50 = sp([pct(g, 50) / pct(b, 50) for g, b in zip(per["gateway"], base, strict=True)])
            for path in per:
                added = "" if path == "sdk" else f"{add50[path].fmt()} | {add99[path].fmt()}"
                lines.append(
                    f"| {size} | {kind} | {PATH_LABELS[path]} | {p50[path].fmt()} | {p99[path].fmt()} | "
                    + (added if added else "— | —")
                    + " |"
                )
            n = len(per["gateway"][0]) if per["gateway"] else 0
            headline = size == "small" and kind == "plain"
            ok = add50["gateway"].med <= 1.0 and add99["gateway"].med <= 5.0
            extra = ""
            if "gateway-httpx" in per:
                extra += (
                    f"; httpx transport adds {add50['gateway-httpx'].fmt(sign=True)} / "
                    f"{add99['gateway-httpx'].fmt(sign=True)}"
                )
            if "forwarder" in per:
                extra += (
                    f"; bare forwarder adds {add50['forwarder'].fmt(sign=True)} / {add99['forwarder'].fmt(sign=True)}"
                )
            if "forwarder-aiohttp" in per:
                extra += (
                    f"; aiohttp forwarder adds {add50['forwarder-aiohttp'].fmt(sign=True)} / "
                    f"{add99['forwarder-aiohttp'].fmt(sign=True)}"
                )
            if "candidate" in per:
                extra += (
                    f"; with the proposed patch {add50['candidate'].fmt(sign=True)} / "
                    f"{add99['candidate'].fmt(sign=True)}"
                )
            report.add(
                "1 overhead",
                f"{size} {kind} turn: added latency p50 / p99 (n={n} per rep)",
                f"p50 {p50['gateway'].fmt()} / p99 {p99['gateway'].fmt()} ms",
                f"letta-client create(): p50 {p50['sdk'].fmt()} / p99 {p99['sdk'].fmt()} ms",
                f"{add50['gateway'].fmt(sign=True)} / {add99['gateway'].fmt(sign=True)} ms (×{ratio50.fmt(3)} at p50)"
                f"{extra}",
                "added p50 ≤ 1 ms, p99 ≤ 5 ms" if headline else "",
                verdict(ok) if headline else "info",
            )
            if headline and not ok:
                report.failures.append("overhead small plain")
            # the floor on the gateway's own stack: the aiohttp forwarder where it ran, else the httpx one
            floor = "forwarder-aiohttp" if "forwarder-aiohttp" in per else "forwarder"
            if headline and floor in per and add50[floor].med > 1.0:
                stack = "aiohttp" if floor == "forwarder-aiohttp" else "httpx"
                also = f" (the httpx one {add50['forwarder'].fmt()} ms)" if floor != "forwarder" else ""
                report.notes.append(
                    f"Overhead: the bare {stack} forwarder alone adds {add50[floor].fmt()} ms at p50 to a small "
                    f"plain turn{also}, so one extra hop through uvicorn + FastAPI + {stack} on this machine already "
                    "costs more than the 1 ms target; the gateway's own share is its difference to that forwarder."
                )
    lines += [
        "",
        "Server CPU time per turn during these runs (user + system CPU of the server process from /proc, divided "
        "by its turns; less sensitive to other load on the machine than wall-clock latency):",
        "",
        "| size | turns | " + " | ".join(f"{SERVER_LABELS.get(n, n)} CPU ms" for n in servers) + " |",
        "|---|---|" + "---|" * len(servers),
    ]
    for size in sizes:
        for k, label in (("plain", "plain turn"), ("pause+resume", "pause + resume (2 turns)")):
            cells = [sp(cpu_turn[size][k][n]).fmt(3) if cpu_turn[size][k][n] else "—" for n in servers]
            lines.append(f"| {size} | {label} | " + " | ".join(cells) + " |")
    g_cpu = sp(cpu_turn["small"]["plain"]["gateway"])
    f_cpu = sp(cpu_turn["small"]["plain"]["forwarder"])
    cpu_extra = ""
    if "gateway-httpx" in servers:
        x_cpu = sp(cpu_turn["small"]["plain"]["gateway-httpx"])
        cpu_extra += (
            f"; httpx-transport gateway {x_cpu.fmt(3)} ms "
            f"(×{sp([a / b for a, b in zip(x_cpu.values, f_cpu.values, strict=True)]).fmt(2)} the bare forwarder's)"
        )
    if "forwarder-aiohttp" in servers:
        a_cpu = sp(cpu_turn["small"]["plain"]["forwarder-aiohttp"])
        cpu_extra += (
            f"; aiohttp forwarder {a_cpu.fmt(3)} ms "
            f"(×{sp([a / b for a, b in zip(g_cpu.values, a_cpu.values, strict=True)]).fmt(2)})"
        )
    report.add(
        "1 overhead",
        "server CPU per small plain turn (sequential turns)",
        f"{g_cpu.fmt(3)} ms",
        f"bare forwarder: {f_cpu.fmt(3)} ms",
        f"×{sp([a / b for a, b in zip(g_cpu.values, f_cpu.values, strict=True)]).fmt(2)}{cpu_extra}",
        "",
        "info",
    )
    lines += [
        "",
        "'added' = that path's percentile − the baseline's percentile (letta-client `agents.messages.create`), per "
        f"repetition; cells are median (min–max) over {cfg.reps} repetitions. The raw-response row is the cheaper "
        "direct call the gateway itself makes (no SDK model parsing): against it the gateway looks about that much "
        "worse. The forwarder rows (plain turns only) are a FastAPI endpoint (uvicorn, same install as the gateway) "
        "that forwards the body to the double and returns the answer untouched, one with httpx (the spec's bare "
        "forwarder) and one with aiohttp (the gateway's own Letta transport where aiohttp is installed, so the honest "
        "floor for the gateway's own overhead): what any proxy on that stack adds."
        + (
            f" The '{PATH_LABELS['gateway-httpx']}' row (plain turns only) is a second gateway process, the same code "
            "and settings but LETTA_HTTP_CLIENT=httpx, the transport of the AWS Lambda deployment (its layer has no "
            "aiohttp); its CPU is in the table above."
            if env.httpx_gateway is not None
            else ""
        ),
    ]
    report.detail("1 overhead", lines)


# ------------------------------------------------------------------------------------------------- 2. streaming


async def streaming_phase(env: Env, cfg: Config, report: Report) -> None:
    env.set_delay(cfg.stream_delay)
    d = Drivers(env.gateway_url, env.double_url, candidate_url=env.candidate_url)
    sizes = {"small": wl.small(), "roo": wl.roo()}
    words = cfg.stream_words

    async def gw_stream(w: wl.Workload, candidate: bool = False) -> dict[str, Any]:
        agent = AGENTS["stream-cand" if candidate else "stream-gw"]
        body = w.gw_plain(agent, stream=True, text=w.say_text(words))
        t0 = time.perf_counter()
        events: list[tuple[float, str]] = []
        content: list[float] = []
        http = d.cand_http if candidate else d.http
        async with http.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200, r.status_code
            async for line in r.aiter_lines():
                now = time.perf_counter() - t0
                if line.startswith(":"):
                    events.append((now, "comment"))
                    continue
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    events.append((now, "done"))
                    break
                payload = json.loads(data)
                events.append((now, "data"))
                choices = payload.get("choices") or []
                if choices and choices[0].get("delta", {}).get("content"):
                    content.append(now)
        return {"first": next(t for t, k in events if k == "data"), "content": content, "end": events[-1][0]}

    async def sdk_stream(w: wl.Workload) -> dict[str, Any]:
        kwargs = w.direct_plain(text=w.say_text(words))
        t0 = time.perf_counter()
        first: float | None = None
        content: list[float] = []
        stream = await d.letta.agents.messages.create(
            AGENTS["stream-sdk"], streaming=True, stream_tokens=True, include_pings=True, **kwargs
        )
        async for event in stream:
            now = time.perf_counter() - t0
            if first is None:
                first = now
            if getattr(event, "message_type", None) == "assistant_message" and event.content:
                content.append(now)
        end = time.perf_counter() - t0
        return {"first": first, "content": content, "end": end}

    lines = [
        f"The double waits {cfg.stream_delay * 1000:.0f} ms before each streamed token event; the answer is "
        f"{words} words = {words} content chunks. Gateway: `stream: true` (+ include_usage) read with httpx line by "
        "line; direct: letta-client `agents.messages.create(streaming=True, stream_tokens=True, include_pings=True)`. "
        f"{cfg.stream_pairs} stream pairs per size and repetition, gateway and direct alternating; 3 pairs per size "
        "of warm-up excluded.",
        "",
        "| size | first event ms (gw / direct) | first content ms (gw / direct) | "
        "added per content chunk p50 / p99 ms | "
        "added growth per chunk ms | gw gap p50 / min ms | first→last content ms (expected) |",
        "|---|---|---|---|---|---|---|",
    ]
    try:
        for size, w in sizes.items():
            for _ in range(3):
                await gw_stream(w)
                await sdk_stream(w)
            reps: dict[str, list[float]] = {
                k: []
                for k in (
                    "gw_first",
                    "d_first",
                    "gw_fc",
                    "d_fc",
                    "add50",
                    "add99",
                    "slope",
                    "gap50",
                    "gapmin",
                    "spread",
                    "ok_gaps",
                    "d_gap50",
                    "cand50",
                )
            }
            for rep in range(cfg.reps):
                added: list[float] = []
                slopes: list[float] = []
                gaps: list[float] = []
                d_gaps: list[float] = []
                spreads: list[float] = []
                g_first, s_first, g_fc, s_fc = [], [], [], []
                cand_added: list[float] = []
                for i in range(cfg.stream_pairs):
                    if i % 2 == 0:
                        g = await gw_stream(w)
                        s = await sdk_stream(w)
                    else:
                        s = await sdk_stream(w)
                        g = await gw_stream(w)
                    assert len(g["content"]) == words == len(s["content"]), (len(g["content"]), len(s["content"]))
                    if env.candidate_url:
                        c = await gw_stream(w, candidate=True)
                        cand_added.extend(a - b for a, b in zip(c["content"], s["content"], strict=True))
                    g_first.append(g["first"])
                    s_first.append(s["first"])
                    g_fc.append(g["content"][0])
                    s_fc.append(s["content"][0])
                    diffs = [a - b for a, b in zip(g["content"], s["content"], strict=True)]
                    added.extend(diffs)
                    slopes.append((diffs[-1] - diffs[0]) / (words - 1))
                    gaps.extend(b - a for a, b in zip(g["content"], g["content"][1:], strict=False))
                    d_gaps.extend(b - a for a, b in zip(s["content"], s["content"][1:], strict=False))
                    spreads.append(g["content"][-1] - g["content"][0])
                reps["gw_first"].append(pct(g_first, 50) * 1000)
                reps["d_first"].append(pct(s_first, 50) * 1000)
                reps["gw_fc"].append(pct(g_fc, 50) * 1000)
                reps["d_fc"].append(pct(s_fc, 50) * 1000)
                reps["add50"].append(pct(added, 50) * 1000)
                reps["add99"].append(pct(added, 99) * 1000)
                if cand_added:
                    reps["cand50"].append(pct(cand_added, 50) * 1000)
                reps["slope"].append(statistics.median(slopes) * 1000)
                reps["gap50"].append(pct(gaps, 50) * 1000)
                reps["d_gap50"].append(pct(d_gaps, 50) * 1000)
                reps["gapmin"].append(min(gaps) * 1000)
                reps["spread"].append(pct(spreads, 50) * 1000)
                reps["ok_gaps"].append(sum(1 for x in gaps if x >= cfg.stream_delay / 2) / len(gaps))
                log(f"streaming/{size}: rep {rep + 1}/{cfg.reps} done")
            S = {k: sp(v) for k, v in reps.items()}
            expected = (words - 1) * cfg.stream_delay * 1000
            lines.append(
                f"| {size} | {S['gw_first'].fmt()} / {S['d_first'].fmt()} | {S['gw_fc'].fmt()} / {S['d_fc'].fmt()} | "
                f"{S['add50'].fmt(3)} / {S['add99'].fmt(3)} | {S['slope'].fmt(3)} | {S['gap50'].fmt()} / "
                f"{S['gapmin'].fmt()} | {S['spread'].fmt(1)} ({expected:.0f}) |"
            )
            ok = S["add50"].med <= 1.0
            cand = f"; with the proposed patch {S['cand50'].fmt(3)} ms" if reps["cand50"] else ""
            report.add(
                "2 streaming",
                f"{size}: added latency per content chunk p50 (p99)",
                f"{S['add50'].fmt(3)} ms (p99 {S['add99'].fmt(3)}){cand}",
                "direct letta-client stream",
                f"first content: {S['gw_fc'].fmt(1)} vs {S['d_fc'].fmt(1)} ms (×"
                f"{sp([a / b for a, b in zip(reps['gw_fc'], reps['d_fc'], strict=True)]).fmt(3)})",
                "≤ 1 ms per chunk" if size == "small" else "",
                verdict(ok) if size == "small" else "info",
            )
            if size == "small" and not ok:
                report.failures.append("streaming per-chunk")
            # A buffering proxy delivers the chunks together at the end: gaps ~0 and no spread. Occasional
            # back-to-back pairs after a scheduling stall (a busy machine) are not buffering.
            unbuffered = S["gap50"].med >= 0.8 * cfg.stream_delay * 1000 and S["spread"].med >= 0.8 * expected
            report.add(
                "2 streaming",
                f"{size}: chunks not buffered under uvicorn (gap p50, first→last content)",
                f"gap {S['gap50'].fmt(2)} ms; spread {S['spread'].fmt(1)} ms",
                f"direct gap {S['d_gap50'].fmt(2)} ms; expected spread {expected:.0f} ms",
                f"{min(reps['ok_gaps']) * 100:.0f}% of gaps ≥ {cfg.stream_delay * 500:.0f} ms",
                "gaps follow the double's delay" if size == "small" else "",
                verdict(unbuffered) if size == "small" else ("info" if unbuffered else "FAIL"),
            )
            if not unbuffered:
                report.failures.append(f"streaming buffered ({size})")
    finally:
        await d.close()
    lines += [
        "",
        "'added per content chunk' = arrival time of content chunk k through the gateway − arrival time of chunk k "
        "directly (both from request start), over all chunks of all pairs; 'growth per chunk' = how much that "
        "difference grows from the first to the last chunk, per chunk (0 = the gateway adds no per-chunk delay, "
        "only its fixed cost). Unbuffered: every content chunk arrives about one double delay after the previous "
        "one, so first→last spans (chunks − 1) × delay; a buffering proxy would deliver them together at the end.",
    ]
    report.detail("2 streaming", lines)


# ----------------------------------------------------------------------- Lambda artifacts (the repo's Makefiles)

RUNTIME_PYTHON = "python3.12"  # the functions' runtime (template.yaml), which the Makefiles build for
LAYER_PLATFORM = "manylinux2014_aarch64"  # layers/dependencies/Makefile's default PLATFORM (the functions' arm64)


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(x) if x.isdigit() else -1 for x in path.parts[-3].split("."))


@functools.cache
def runtime_python() -> tuple[str, str]:
    """(interpreter, "") for a working CPython 3.12 with pip, else ("", why not). `python3.12` on PATH first
    (shutil.which); a pyenv shim of that name can exist without that version being selected, so every candidate is
    run, and pyenv's own 3.12.* installs, /usr/local/bin and /usr/bin are tried next, as .ci/template-check does.
    The interpreter's own path (sys.executable) is returned, not the shim's."""
    candidates: list[str] = []
    if found := shutil.which(RUNTIME_PYTHON):
        candidates.append(found)
    versions = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    candidates += [
        str(p) for p in sorted(versions.glob(f"3.12.*/bin/{RUNTIME_PYTHON}"), key=_version_key, reverse=True)
    ]
    candidates += [f"/usr/local/bin/{RUNTIME_PYTHON}", f"/usr/bin/{RUNTIME_PYTHON}"]
    check = "import sys, pip\nif sys.version_info[:2] != (3, 12): sys.exit(1)\nprint(sys.executable)"
    tried = []
    for candidate in dict.fromkeys(candidates):
        if not os.access(candidate, os.X_OK):
            continue
        tried.append(candidate)
        try:
            proc = subprocess.run(
                [candidate, "-c", check], capture_output=True, text=True, timeout=30, env=build_env(), cwd=str(ROOT)
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout.strip().splitlines()[-1], ""
    return "", (
        f"no working {RUNTIME_PYTHON} with pip found (shutil.which on PATH, pyenv versions/3.12.*, /usr/local/bin, "
        f"/usr/bin; ran: {', '.join(tried) or 'none exists'})"
    )


def python_version(py: str) -> str:
    return subprocess.run(
        [py, "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        env=build_env(),
    ).stdout.strip()


def host_layer_platform() -> str:
    """The pip platform tag of this machine's architecture ("" if the Makefile's platforms do not cover it)."""
    return {
        "x86_64": "manylinux2014_x86_64",
        "amd64": "manylinux2014_x86_64",
        "aarch64": "manylinux2014_aarch64",
        "arm64": "manylinux2014_aarch64",
    }.get(platform.machine().lower(), "")


def build_env() -> dict[str, str]:
    """The environment for builds with the runtime's Python: none of this venv's paths, no outer make's flags."""
    drop = {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PIP_ROOT_USER_ACTION="ignore", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _run_build(argv: list[str], log_path: Path, timeout: float = 600) -> None:
    with open(log_path, "ab") as fh:
        fh.write(f"$ {shlex.join(argv)}\n".encode())
        fh.flush()
        proc = subprocess.run(
            argv, cwd=str(ROOT), env=build_env(), stdout=fh, stderr=subprocess.STDOUT, timeout=timeout
        )
    if proc.returncode != 0:
        tail = " | ".join(log_path.read_text(errors="replace").strip().splitlines()[-3:])
        raise RuntimeError(f"`{shlex.join(argv[:4])} …` exited with {proc.returncode}: {tail[-300:]}")


def artifact(env: Env, key: str, build: Callable[[Path, str], Path | None]) -> Path:
    """A Lambda artifact built once per run with the runtime's Python into env.tmp/lambda/<key> (`build(dest, py)`,
    which may return another path, e.g. a cache); raises RuntimeError(why) if it cannot be built."""
    cached = env.artifacts.get(key)
    if isinstance(cached, Path):
        return cached
    if isinstance(cached, str):
        raise RuntimeError(cached)
    py, why = runtime_python()
    dest = env.tmp / "lambda" / key
    t0 = time.perf_counter()
    try:
        if not py:
            raise RuntimeError(why)
        if not shutil.which("make"):
            raise RuntimeError("`make` not found on PATH")
        dest.parent.mkdir(parents=True, exist_ok=True)
        result = build(dest, py) or dest
    except (RuntimeError, OSError, subprocess.SubprocessError) as error:
        env.artifacts[key] = f"{key}: {error}"
        raise RuntimeError(env.artifacts[key]) from None
    log(f"built {key} with {py} in {time.perf_counter() - t0:.1f} s")
    env.artifacts[key] = result
    return result


def function_artifact(env: Env) -> Path:
    """`make -C functions build-GatewayFunction` (the code under test: functions/, or BENCH_FUNCTIONS)."""

    def build(dest: Path, py: str) -> None:
        src = Path(procs.functions_dir())
        makefile = src / "Makefile" if (src / "Makefile").is_file() else ROOT / "functions" / "Makefile"
        cmd = ["make", "--no-print-directory", "-C", str(src), "-f", str(makefile), "build-GatewayFunction"]
        _run_build([*cmd, f"ARTIFACTS_DIR={dest}", f"PYTHON={py}"], env.tmp / "build-function.log")

    return artifact(env, "function", build)


def layer_pip(py: str, target: Path, platform_tag: str) -> list[str]:
    """layers/dependencies/Makefile's pip install (sources only: --no-compile, and no bytecode step after it)."""
    return [
        *(py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile"),
        *("--target", str(target), "--platform", platform_tag, "--implementation", "cp", "--python-version", "3.12"),
        *("--only-binary=:all:", "-r", str(ROOT / "layers/dependencies/requirements.txt")),
    ]


def layer_artifact(env: Env, platform_tag: str, bytecode: bool = True) -> Path:
    """The dependency layer for `platform_tag`: `make -C layers/dependencies build-DependenciesLayer` (bytecode, as
    shipped) or, for `bytecode=False`, the Makefile's pip install alone (sources, no bytecode step)."""

    def build(dest: Path, py: str) -> None:
        log_path = env.tmp / f"build-layer-{platform_tag}.log"
        if bytecode:
            cmd = ["make", "--no-print-directory", "-C", str(ROOT / "layers/dependencies"), "build-DependenciesLayer"]
            _run_build([*cmd, f"ARTIFACTS_DIR={dest}", f"PYTHON={py}", f"PLATFORM={platform_tag}"], log_path)
            return
        _run_build(layer_pip(py, dest / "python", platform_tag), log_path)

    return artifact(env, f"layer-{'bytecode' if bytecode else 'sources'}-{platform_tag}", build)


def runtime_sdk(env: Env) -> Path:
    """boto3 for the runtime's Python (the Lambda runtime ships it; the layer does not): .ci/template-check's cache
    when it has one, else `pip install boto3 --target` (pip caches the download)."""

    def build(dest: Path, py: str) -> Path | None:
        cache = Path(os.environ.get("LETTA_GATEWAY_CACHE") or Path.home() / ".cache" / "letta-gateway")
        cached = cache / f"runtime-sdk-py{python_version(py)}"
        if (cached / ".complete").is_file():
            return cached
        cmd = [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target", str(dest), "boto3"]
        _run_build(cmd, env.tmp / "build-runtime-sdk.log")
        return None

    return artifact(env, "runtime-sdk", build)


# ------------------------------------------------------------------------------------------------ 3. cold start

COLD_PROBE = r"""
import json, sys, time
t0 = time.perf_counter()
import importlib
mod = importlib.import_module(sys.argv[1])
t1 = time.perf_counter()
out = {"import_s": t1 - t0, "modules": len(sys.modules), "file": getattr(mod, "__file__", "") or ""}
if len(sys.argv) > 2:
    event = json.load(open(sys.argv[2]))
    class Ctx:
        function_name = "bench"; function_version = "$LATEST"; memory_limit_in_mb = 1024
        invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:bench"
        aws_request_id = "bench-cold"; log_group_name = "/aws/lambda/bench"; log_stream_name = "bench"
        @staticmethod
        def get_remaining_time_in_millis(): return 29000
    resp = mod.handler(event, Ctx())
    t2 = time.perf_counter()
    assert resp["statusCode"] == 200, resp
    out["first_turn_s"] = t2 - t1
    out["total_s"] = t2 - t0
    out["modules"] = len(sys.modules)
out["module_names"] = sorted(sys.modules)
print("COLD " + json.dumps(out))
"""

EAGER_THEN_HANDLER = """
import boto3, httpx, letta_client, fastapi, mangum, aws_lambda_powertools  # noqa
from aws_lambda_powertools.utilities import parameters  # noqa
from letta_gateway.handler import handler, app  # noqa
"""

LAMBDA_VARIANTS = ("lambda-bytecode", "lambda-sources")


def run_cold(argv: list[str], env: dict[str, str], expect_under: str = "") -> dict[str, Any]:
    """One fresh process running COLD_PROBE; `expect_under`: the imported module must come from this directory."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"cold probe failed: {err.decode()[-2000:]}")
    line = next(x for x in out.decode().splitlines() if x.startswith("COLD "))
    data = json.loads(line[5:])
    data["wall_s"] = wall
    if expect_under and not data["file"].startswith(expect_under + os.sep):
        raise RuntimeError(f"cold probe imported {data['file']}, not the copy under {expect_under}")
    return data


def compiled_code(env: Env) -> Path:
    """The gateway's package (functions/, or BENCH_FUNCTIONS) and the benchmark's modules, copied and compiled to
    unchecked-hash .pyc by the bench's interpreter, as functions/Makefile ships the function code with bytecode."""
    dest = env.tmp / "compiled"
    shutil.copytree(
        Path(procs.functions_dir()) / "letta_gateway",
        dest / "letta_gateway",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    for name in ("naive_app.py", "floor_app.py"):
        shutil.copy2(BENCH / name, dest / name)
    (dest / "eager_then_handler.py").write_text(EAGER_THEN_HANDLER)
    subprocess.run(
        [procs.python(), "-m", "compileall", "-q", "--invalidation-mode", "unchecked-hash", str(dest)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return dest


def lambda_like(env: Env) -> tuple[str, dict[str, list[str]], dict[str, str], str]:
    """The Lambda-like pair: (python3.12, argv per variant, their environment, the function dir), built with the
    repo's Makefiles for this machine's architecture. Raises RuntimeError(why) when it cannot be set up."""
    host = host_layer_platform()
    if not host:
        raise RuntimeError(f"no manylinux platform tag for this machine ({platform.machine()})")
    py, why = runtime_python()
    if not py:
        raise RuntimeError(why)
    fn = function_artifact(env)
    sdk = runtime_sdk(env)
    layers = {
        "lambda-bytecode": layer_artifact(env, host, bytecode=True),
        "lambda-sources": layer_artifact(env, host, bytecode=False),
    }
    argv = {}
    for name, layer in layers.items():
        # as in Lambda: /var/task, then /opt/python, then the runtime's own packages (boto3)
        paths = [str(fn), str(layer / "python"), str(sdk)]
        argv[name] = [py, "-c", f"import sys; sys.path[:0] = {paths!r}\n{COLD_PROBE}", "letta_gateway.handler"]
    lambda_env = {
        "PATH": os.pathsep.join([str(Path(py).parent), "/usr/bin", "/bin"]),
        "HOME": str(env.tmp),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",  # /var/task and /opt are read-only in Lambda: nothing compiled survives
        "GATEWAY_API_KEYS": wl.GATEWAY_KEY,
        "LETTA_API_KEY": wl.LETTA_KEY,
        "LETTA_HTTP_CLIENT": "httpx",
        "GATEWAY_LOG_LEVEL": "WARNING",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
    }
    return f"{py} ({python_version(py)})", argv, lambda_env, str(fn)


def _module_gap(more: list[str], fewer: list[str]) -> tuple[int, str]:
    extra = set(more) - set(fewer)
    tops: dict[str, int] = {}
    for name in extra:
        top = name.split(".")[0]
        tops[top] = tops.get(top, 0) + 1
    return len(extra), ", ".join(f"{k} {n}" for k, n in sorted(tops.items(), key=lambda kv: (-kv[1], kv[0])))


def cold_phase(env: Env, cfg: Config, report: Report) -> None:
    env.set_delay(0.0)
    event = json.loads((ROOT / "events" / "chat.json").read_text())
    body = wl.small().gw_plain(AGENTS["cold"])
    event["body"] = json.dumps(body)
    event["isBase64Encoded"] = False
    auth = f"Bearer {wl.GATEWAY_KEY}"
    for key in list(event.get("headers") or {}):
        if key.lower() == "authorization":
            event["headers"][key] = auth
    for key in list(event.get("multiValueHeaders") or {}):
        if key.lower() == "authorization":
            event["multiValueHeaders"][key] = [auth]
    event_path = env.tmp / "cold-chat-event.json"
    event_path.write_text(json.dumps(event))
    code = compiled_code(env)

    base = child_env(
        GATEWAY_API_KEYS=wl.GATEWAY_KEY,
        LETTA_API_KEY=wl.LETTA_KEY,
        GATEWAY_LOG_LEVEL="WARNING",
        AWS_EC2_METADATA_DISABLED="true",
        LETTA_HTTP_CLIENT="httpx",  # the Lambda layer's transport (it has no aiohttp)
    )
    base.pop("LETTA_BASE_URL", None)
    # the compiled copy in place of functions/ and bench/ (their sources are not on the path at all)
    sources = {os.path.normpath(procs.functions_dir()), os.path.normpath(str(BENCH))}
    rest = [p for p in base["PYTHONPATH"].split(os.pathsep) if p and os.path.normpath(p) not in sources]
    base["PYTHONPATH"] = os.pathsep.join([str(code), *rest])
    turn_env = dict(base, LETTA_BASE_URL=env.double_url, GATEWAY_STATE_PATH=str(env.tmp / "cold.sqlite3"))
    py = procs.python()
    variants: dict[str, tuple[list[str], dict[str, str]]] = {
        "handler": ([py, "-c", COLD_PROBE, "letta_gateway.handler"], base),
        "asgi": ([py, "-c", COLD_PROBE, "letta_gateway.asgi"], base),
        "naive": ([py, "-c", COLD_PROBE, "naive_app"], base),
        "floor": ([py, "-c", COLD_PROBE, "floor_app"], base),
        "handler+turn": ([py, "-c", COLD_PROBE, "letta_gateway.handler", str(event_path)], turn_env),
        "eager+handler+turn": ([py, "-c", COLD_PROBE, "eager_then_handler", str(event_path)], turn_env),
    }
    expect = dict.fromkeys(variants, str(code))
    lambda_why = lambda_py = ""
    try:
        lambda_py, lambda_argv, lambda_env, fn_dir = lambda_like(env)
        for name in LAMBDA_VARIANTS:
            variants[name] = (lambda_argv[name], lambda_env)
            expect[name] = fn_dir
    except RuntimeError as error:
        lambda_why = str(error)
        log(f"cold start: Lambda-like pair unavailable: {lambda_why}")
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in variants}
    log(f"cold start: 1 warm-up + {cfg.cold_runs} fresh processes per variant ({len(variants)}), interleaved")
    for i in range(cfg.cold_runs + 1):
        names = list(variants)
        names = names[i % len(names) :] + names[: i % len(names)]
        for name in names:
            if name not in variants:
                continue
            argv, e = variants[name]
            try:
                result = run_cold(argv, e, expect[name])
            except (RuntimeError, subprocess.SubprocessError, StopIteration, ValueError) as error:
                if name not in LAMBDA_VARIANTS:
                    raise
                lambda_why = f"{name} probe failed: {str(error)[-300:]}"
                log(f"cold start: Lambda-like pair dropped: {lambda_why}")
                for k in LAMBDA_VARIANTS:
                    variants.pop(k, None)
                    runs.pop(k, None)
                continue
            if i > 0:
                runs[name].append(result)
    imp = {k: sp([r["import_s"] * 1000 for r in v]) for k, v in runs.items()}
    wall = {k: sp([r["wall_s"] * 1000 for r in v]) for k, v in runs.items()}
    mods = {k: int(statistics.median([r["modules"] for r in v])) for k, v in runs.items()}
    for entry in ("handler", "asgi"):
        ratio = sp([a["import_s"] / b["import_s"] for a, b in zip(runs[entry], runs["naive"], strict=True)])
        ratio_wall = sp([a["wall_s"] / b["wall_s"] for a, b in zip(runs[entry], runs["naive"], strict=True)])
        label = "Mangum handler" if entry == "handler" else "uvicorn/LWA asgi"
        report.add(
            "3 cold start",
            f"import letta_gateway.{entry} + app build ({label})",
            f"{imp[entry].fmt(0)} ms (process {wall[entry].fmt(0)} ms)",
            f"naive eager: {imp['naive'].fmt(0)} ms (process {wall['naive'].fmt(0)} ms)",
            f"×{ratio.fmt(3)} (process ×{ratio_wall.fmt(3)})",
            "≤ 0.5× naive",
            verdict(ratio.med <= 0.5),
        )
        if ratio.med > 0.5:
            report.failures.append(f"cold start {entry}")
    floor_ratio = sp([a["import_s"] / b["import_s"] for a, b in zip(runs["floor"], runs["naive"], strict=True)])
    above_floor = sp(
        [(a["import_s"] - b["import_s"]) * 1000 for a, b in zip(runs["handler"], runs["floor"], strict=True)]
    )
    report.add(
        "3 cold start",
        "stack floor: smallest FastAPI + Mangum module (one route, a pydantic body)",
        f"{imp['floor'].fmt(0)} ms (process {wall['floor'].fmt(0)} ms)",
        f"naive eager: {imp['naive'].fmt(0)} ms",
        f"×{floor_ratio.fmt(3)}; the Mangum handler is {above_floor.fmt(0, sign=True)} ms above it",
        "",
        "info",
    )
    if floor_ratio.med > 0.45:
        report.notes.append(
            f"Cold start: the smallest FastAPI + Mangum module alone takes ×{floor_ratio.fmt(3)} of the naive "
            "module's import + build here (FastAPI's import and its route build, which imports pydantic.v1 to rule "
            "out v1 models), so ≤ 0.5× leaves the gateway's own code almost nothing; its cost is the difference to "
            "that floor. With SnapStart (on by default in template.yaml) a cold start restores a snapshot taken after "
            "this init instead of running it."
        )
    first = {k: sp([r["total_s"] * 1000 for r in runs[k]]) for k in ("handler+turn", "eager+handler+turn")}
    turn_only = {k: sp([r["first_turn_s"] * 1000 for r in runs[k]]) for k in ("handler+turn", "eager+handler+turn")}
    ratio_first = sp(
        [a["total_s"] / b["total_s"] for a, b in zip(runs["handler+turn"], runs["eager+handler+turn"], strict=True)]
    )
    report.add(
        "3 cold start",
        "init + first chat turn through the handler (Letta double, 0 ms)",
        f"{first['handler+turn'].fmt(0)} ms (turn {turn_only['handler+turn'].fmt(0)})",
        f"eager imports first: {first['eager+handler+turn'].fmt(0)} ms (turn {turn_only['eager+handler+turn'].fmt(0)})",
        f"×{ratio_first.fmt(3)}",
        "",
        "info",
    )
    lambda_label = (
        "Lambda-like (Python 3.12, built artifacts): import handler from the bytecode layer vs a layer of sources"
    )
    lambda_ok = all(k in runs for k in LAMBDA_VARIANTS)
    if lambda_ok:
        b, s = runs["lambda-bytecode"], runs["lambda-sources"]
        lambda_ratio = sp([x["import_s"] / y["import_s"] for x, y in zip(b, s, strict=True)])
        lambda_saved = sp([(y["import_s"] - x["import_s"]) * 1000 for x, y in zip(b, s, strict=True)])
        report.add(
            "3 cold start",
            lambda_label,
            f"bytecode layer: {imp['lambda-bytecode'].fmt(0)} ms (process {wall['lambda-bytecode'].fmt(0)} ms)",
            f"sources layer: {imp['lambda-sources'].fmt(0)} ms (process {wall['lambda-sources'].fmt(0)} ms)",
            f"×{lambda_ratio.fmt(3)} ({lambda_saved.fmt(0)} ms less per cold start)",
            "",
            "info",
        )
    else:
        report.add("3 cold start", lambda_label, "n/a", lambda_why[:300], "", "", "info")
    lines = [
        f"Fresh `python` processes, {cfg.cold_runs} measured per variant after one warm-up run each; variants "
        f"interleaved. {pyc_note()} 'import' is measured inside the process around "
        "`importlib.import_module` (module import + app build: what Lambda's init phase runs after the runtime "
        "starts); 'process' is the wall time of the whole `python -c` process (interpreter start included). "
        "Environment: GATEWAY_API_KEYS and LETTA_API_KEY set (Letta Cloud URL) and LETTA_HTTP_CLIENT=httpx, the "
        "Lambda layer's transport; nothing else.",
        "",
        "| variant | import + build ms | process wall ms | modules loaded |",
        "|---|---|---|---|",
    ]
    names = {
        "handler": "`letta_gateway.handler` (Mangum)",
        "asgi": "`letta_gateway.asgi` (uvicorn / Lambda Web Adapter)",
        "naive": "naive eager module (bench/naive_app.py: fastapi, mangum, boto3, letta_client, powertools, app)",
        "floor": "stack floor (bench/floor_app.py: FastAPI + Mangum, one route with a pydantic body)",
        "handler+turn": "`letta_gateway.handler` + first chat turn (lazy imports paid here)",
        "eager+handler+turn": "eager imports + `letta_gateway.handler` + first chat turn",
        "lambda-bytecode": "Lambda-like, Python 3.12: built function + bytecode layer (as shipped)",
        "lambda-sources": "Lambda-like, Python 3.12: built function + layer of sources (no bytecode step)",
    }
    for k, label in names.items():
        if k not in runs:
            continue
        extra = f" (first turn {turn_only[k].fmt(0)})" if k in turn_only else ""
        lines.append(f"| {label} | {imp[k].fmt(0)}{extra} | {wall[k].fmt(0)} | {mods[k]} |")
    lines += [
        "",
        "The gateway defers letta-client (+ its httpx stack, and aiohttp where that is its transport) to the first "
        "Letta call and boto3 to the first DynamoDB / Secrets Manager call. The last two rows show what that is "
        "worth on the first chat turn: "
        "the deferred imports are paid by the first turn instead of the init phase, minus what is never imported "
        "at all on that path (boto3 for a plain turn with keys from the environment).",
        "",
        *lambda_prose(runs, lambda_py, lambda_why),
    ]
    lines += ["", *import_breakdown(variants["handler"][1], variants["naive"][1])]
    report.detail("3 cold start", lines)


def lambda_prose(runs: dict[str, list[dict[str, Any]]], py: str, why: str) -> list[str]:
    """The paragraph on the Lambda-like pair."""
    host = host_layer_platform() or platform.machine()
    what = (
        "The Lambda-like pair builds the artifacts the way `sam build` does (template.yaml: `BuildMethod: "
        "makefile`): functions/Makefile `build-GatewayFunction` (the package plus its unchecked-hash .pyc for "
        f"Python 3.12) and layers/dependencies/Makefile `build-DependenciesLayer`, here with PLATFORM={host} "
        "because the shipped arm64 layer cannot be imported on this machine (the same pins; every .py replaced by "
        "its .pyc). Its twin is the Makefile's pip install alone (`--no-compile`, no bytecode step): a layer of "
        "sources. Each runs `import letta_gateway.handler` in a fresh `python3.12` process whose environment holds "
        "only PATH, HOME, LANG, PYTHONDONTWRITEBYTECODE=1, the gateway's and Letta's keys, LETTA_HTTP_CLIENT=httpx, "
        "GATEWAY_LOG_LEVEL, the AWS region and AWS_EC2_METADATA_DISABLED, with sys.path starting with the function "
        "dir, the layer's python/ and boto3 (installed apart: the Lambda runtime ships it, the layer does not) in "
        "that order, as /var/task, /opt/python and the runtime's packages in Lambda. Lambda's /var/task and /opt are "
        "read-only, so a layer of sources is compiled again on every cold start; the pair measures that cost."
    )
    if not all(k in runs for k in LAMBDA_VARIANTS):
        return [f"{what} Not measured in this run: {why}."]
    lines = [f"{what} Interpreter: {py}."]
    count, tops = _module_gap(runs["lambda-bytecode"][0]["module_names"], runs["lambda-sources"][0]["module_names"])
    if count:
        note = (
            f" The bytecode layer loads {count} modules the sources layer does not ({tops})"
            if tops
            else f" The bytecode layer loads {count} more modules"
        )
        if "anyio" in tops:
            note += (
                ": anyio's lazy importer (anyio/_lazyimport.py) builds its map by parsing the package's source with "
                "`ast`, and without the source it imports its submodules eagerly"
            )
        lines[0] += note + "."
    return lines


def pyc_note() -> str:
    """What the measured imports compile: nothing of the gateway's or the benchmark's modules (a compiled copy, as
    the shipped function artifact has its bytecode); installed packages have their .pyc from pip."""
    compiled = (
        "The gateway's package (functions/letta_gateway) and the benchmark's modules (naive_app, floor_app, the "
        "eager-imports script) are imported from a copy compiled by this interpreter with `compileall "
        "--invalidation-mode unchecked-hash`, not from their sources: the shipped function artifact carries its "
        "bytecode (functions/Makefile), so no variant pays for compiling its own code; installed packages have "
        "their .pyc from pip."
    )
    if os.environ.get("PYTHONDONTWRITEBYTECODE") or sys.flags.dont_write_bytecode:
        return (
            f"{compiled} PYTHONDONTWRITEBYTECODE is set on this machine, so nothing is written during the runs; a "
            "module without a .pyc would be compiled on every import."
        )
    return f"{compiled} The warm-up run writes .pyc files for anything else, so no variant compiles when measured."


def import_breakdown(gateway_env: dict[str, str], naive_env: dict[str, str]) -> list[str]:
    """Where the import time goes: `python -X importtime`, self time summed by top-level package (one process each,
    after the measured runs, so .pyc files are warm)."""
    py = procs.python()
    out: dict[str, dict[str, float]] = {}
    for label, module, env in (
        ("gateway handler", "letta_gateway.handler", gateway_env),
        ("naive", "naive_app", naive_env),
    ):
        proc = subprocess.run(
            [py, "-X", "importtime", "-c", f"import {module}"],
            env=env,
            cwd=str(ROOT),
            capture_output=True,
            text=True,
            timeout=60,
        )
        totals: dict[str, float] = {}
        for line in proc.stderr.splitlines():
            if not line.startswith("import time:") or "self [us]" in line:
                continue
            try:
                self_us, _cum, name = (x.strip() for x in line.split(":", 1)[1].split("|"))
                top = name.split(".")[0]
                totals[top] = totals.get(top, 0.0) + int(self_us) / 1000
            except ValueError:
                continue
        out[label] = totals
    names = sorted(
        set(out["gateway handler"]) | set(out["naive"]),
        key=lambda k: -max(out["gateway handler"].get(k, 0.0), out["naive"].get(k, 0.0)),
    )
    lines = [
        "Import time by top-level package (`python -X importtime`, self times summed per package, one run each; "
        "the module's own import also covers building the app at import time):",
        "",
        "| package | gateway handler ms | naive ms |",
        "|---|---|---|",
    ]
    other_g = other_n = 0.0
    for k in names:
        g, n = out["gateway handler"].get(k, 0.0), out["naive"].get(k, 0.0)
        if max(g, n) < 8:
            other_g += g
            other_n += n
            continue
        lines.append(f"| {k} | {g:.0f} | {n:.0f} |")
    lines.append(f"| everything else | {other_g:.0f} | {other_n:.0f} |")
    lines.append(
        f"| **total** | **{sum(out['gateway handler'].values()):.0f}** | **{sum(out['naive'].values()):.0f}** |"
    )
    return lines


# ------------------------------------------------------------------------------------------------ 4. throughput


def double_stats(env: Env) -> dict[str, int]:
    r = httpx.get(f"{env.double_url}/_bench/stats", timeout=5)
    data = r.json()
    return {"turns": int(data["turns"]), "agent_reads": int(data.get("agent_reads", 0))}


def run_load(
    env: Env,
    name: str,
    url: str,
    body: bytes,
    cfg: Config,
    watch: dict[str, int],
    cpus: set[int] | None,
    on_window: Callable[[str], None] | None = None,
    duration: float | None = None,
    concurrency: int | None = None,
) -> dict[str, Any]:
    body_path = env.tmp / f"{name}-body.json"
    body_path.write_bytes(body)
    argv = [
        procs.python(),
        str(BENCH / "loadgen.py"),
        "--url",
        url,
        "--body-file",
        str(body_path),
        "--header",
        f"Authorization: Bearer {wl.GATEWAY_KEY}",
        "--concurrency",
        str(concurrency or cfg.tput_concurrency),
        "--warmup",
        str(cfg.tput_warmup),
        "--duration",
        str(duration if duration is not None else cfg.tput_duration),
    ]
    proc = env.procs.start(f"loadgen-{name}", argv, cpus=cpus, stdout_pipe=True)
    watch = dict(watch, loadgen=proc.pid)
    marks: dict[str, tuple[float, dict[str, float]]] = {}
    stats: dict[str, dict[str, int]] = {}
    before = double_stats(env)
    result: dict[str, Any] | None = None
    assert proc.stdout is not None
    deadline = time.monotonic() + cfg.tput_warmup + (duration or cfg.tput_duration) + 60
    for raw in proc.stdout:
        line = raw.decode().strip()
        if line in ("WINDOW_START", "WINDOW_END"):
            marks[line] = (time.perf_counter(), {k: cpu_seconds(pid) for k, pid in watch.items()})
            stats[line] = double_stats(env)
            if on_window:
                on_window(line)
        elif line.startswith("RESULT "):
            result = json.loads(line[7:])
        if time.monotonic() > deadline:
            break
    env.procs.stop(proc)
    if result is None or "WINDOW_START" not in marks or "WINDOW_END" not in marks:
        raise RuntimeError(f"load generator {name} gave no result (see {env.tmp}/loadgen-{name}.log)")
    (t0, c0), (t1, c1) = marks["WINDOW_START"], marks["WINDOW_END"]
    after = double_stats(env)
    result["cpu_util"] = {k: (c1[k] - c0[k]) / (t1 - t0) for k in watch}
    result["agent_reads_window"] = stats["WINDOW_END"]["agent_reads"] - stats["WINDOW_START"]["agent_reads"]
    result["agent_reads_total"] = after["agent_reads"] - before["agent_reads"]
    result["letta_posts_window"] = stats["WINDOW_END"]["turns"] - stats["WINDOW_START"]["turns"]
    result["cpu_ms_per_req"] = {k: (c1[k] - c0[k]) * 1000 / max(1, result["ok"]) for k in watch}
    return result


def throughput_phase(env: Env, cfg: Config, report: Report) -> dict[str, Any]:
    assert env.double is not None and env.gateway is not None and env.forwarder is not None
    env.set_delay(0.0)
    two = procs.cpu_count() >= 2
    server_cpus = {0} if two else None
    harness_cpus = {1} if two else None
    agent = AGENTS["tput"]
    fwd = env.forwarder
    body = wl.body_bytes(wl.small().gw_plain(agent))
    targets = {"gateway": (f"{env.gateway_url}/v1/chat/completions", env.gateway.pid)}
    if env.httpx_gateway is not None:  # pinned and alternated like the others; the verdict stays the default one's
        targets["gateway-httpx"] = (f"{env.httpx_gateway_url}/v1/chat/completions", env.httpx_gateway.pid)
    targets["forwarder"] = (f"{env.forwarder_url}/forward/{agent}", fwd.pid)
    if env.aio_forwarder is not None:
        targets["forwarder-aiohttp"] = (f"{env.aio_forwarder_url}/forward/{agent}", env.aio_forwarder.pid)
    if env.candidate is not None:
        targets["candidate"] = (f"{env.candidate_url}/v1/chat/completions", env.candidate.pid)
    for _, pid in targets.values():
        pin(pid, server_cpus)
    pin(env.double.pid, harness_cpus)
    levels = cfg.tput_levels
    # results[concurrency][server] -> one result per repetition
    results: dict[int, dict[str, list[dict[str, Any]]]] = {c: {k: [] for k in targets} for c in levels}
    try:
        for name, (url, pid) in targets.items():  # warm each server (connections, lazy clients), excluded
            run_load(
                env,
                f"warm-{name}",
                url,
                body,
                cfg,
                {"server": pid, "double": env.double.pid},
                harness_cpus,
                duration=1.0,
                concurrency=max(levels),
            )
        for conc in levels:
            for rep in range(cfg.reps):
                order = list(targets) if rep % 2 == 0 else list(reversed(targets))
                for name in order:
                    url, pid = targets[name]
                    r = run_load(
                        env,
                        f"{name}-c{conc}-{rep}",
                        url,
                        body,
                        cfg,
                        {"server": pid, "double": env.double.pid},
                        harness_cpus,
                        concurrency=conc,
                    )
                    if r["statuses"].keys() - {"200"}:
                        raise RuntimeError(f"{name}: non-200 answers under load: {r['statuses']} {r['errors']}")
                    results[conc][name].append(r)
                    log(
                        f"throughput/c{conc}/{name}: rep {rep + 1}/{cfg.reps}: {r['rps']:.0f} turns/s, server CPU "
                        f"{r['cpu_util']['server'] * 100:.0f}%, double {r['cpu_util']['double'] * 100:.0f}%, "
                        f"loadgen {r['cpu_util']['loadgen'] * 100:.0f}%"
                    )
    finally:
        for _, pid in targets.values():
            pin(pid, None)
        pin(env.double.pid, None)

    layout = (
        "CPU 0: the server under test (a gateway or a forwarder, one uvicorn worker each; the idle ones wait there "
        "too); "
        "CPU 1: the Letta double and the load generator"
        if two
        else "single CPU: everything shares it"
    )
    lines = [
        "Zero-latency Letta double; plain small turns. Load: bench/loadgen.py in its own process, httpx async, N "
        "workers each with its own keep-alive connection, "
        f"{cfg.tput_warmup:.1f} s warm-up (excluded) then a {cfg.tput_duration:.0f} s measured window; one 1 s "
        "warm-up load per server before the repetitions; servers alternate within each repetition. Cores: "
        f"{layout} (taskset / sched_setaffinity). CPU use is read from /proc/<pid>/stat over the measured window.",
        "",
        "| concurrency | server | turns/s | latency p50 / p99 ms | server CPU % | server CPU ms/turn | "
        "double CPU % | loadgen CPU % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    per_cpu: dict[str, float] = {}
    for conc in levels:
        res = results[conc]
        rps = {k: sp([r["rps"] for r in v]) for k, v in res.items()}
        ratio = sp([a["rps"] / b["rps"] for a, b in zip(res["gateway"], res["forwarder"], strict=True)])
        headline = conc == cfg.tput_concurrency
        ok = rps["gateway"].med >= 1000 and ratio.med >= 0.7
        extra = ""
        if "gateway-httpx" in res:
            xratio = sp([a["rps"] / b["rps"] for a, b in zip(res["gateway-httpx"], res["forwarder"], strict=True)])
            xcpu = sp([r["cpu_ms_per_req"]["server"] for r in res["gateway-httpx"]])
            extra += (
                f"; httpx transport {rps['gateway-httpx'].fmt(0)} turns/s (×{xratio.fmt(3)} to the forwarder, "
                f"{xcpu.fmt(3)} CPU ms/turn)"
            )
        if "forwarder-aiohttp" in res:
            aratio = sp([a["rps"] / b["rps"] for a, b in zip(res["gateway"], res["forwarder-aiohttp"], strict=True)])
            extra += f"; aiohttp forwarder {rps['forwarder-aiohttp'].fmt(0)} req/s (gateway ×{aratio.fmt(3)})"
        if "candidate" in res:
            cratio = sp([a["rps"] / b["rps"] for a, b in zip(res["candidate"], res["forwarder"], strict=True)])
            extra += f"; with the proposed patch {rps['candidate'].fmt(0)} turns/s (×{cratio.fmt(3)})"
        report.add(
            "4 throughput",
            f"plain small turns/s, one uvicorn worker, concurrency {conc}",
            f"{rps['gateway'].fmt(0)} turns/s",
            f"bare forwarder: {rps['forwarder'].fmt(0)} req/s",
            f"×{ratio.fmt(3)}{extra}",
            "≥ 1000 turns/s and ≥ 0.7×" if headline else "",
            verdict(ok) if headline else "info",
        )
        if headline and not ok:
            report.failures.append("throughput")
        # the fastest forwarder measured (either client) bounds what any gateway on this stack reaches here
        fastest = max((k for k in FORWARDERS if k in rps), key=lambda k: rps[k].med)
        if headline and rps[fastest].med < 1000:
            client = "aiohttp" if fastest == "forwarder-aiohttp" else "httpx"
            busy = sp([r["cpu_util"]["server"] * 100 for r in res[fastest]])
            if busy.med < 80:  # the forwarder idles part of the time: the harness core is what caps it
                why = (
                    f"; its server used only {busy.fmt(0)} % of its core, so the harness core (the double and the "
                    "load generator) caps what this setup can measure, and ≥ 1000 turns/s on one worker is out of "
                    "reach of any server measured this way here"
                )
            else:
                why = ", so ≥ 1000 turns/s on one worker is out of reach for any gateway on this stack here"
            report.notes.append(
                f"Throughput: the fastest bare forwarder measured (the {client} one) itself reaches "
                f"{rps[fastest].fmt(0)} req/s at concurrency {conc} on this machine{why}; the ratio to the (httpx) "
                "forwarder is the meaningful half of the target."
            )
        for k, v in res.items():
            cpu = {p: sp([r["cpu_util"][p] * 100 for r in v]) for p in ("server", "double", "loadgen")}
            per = sp([r["cpu_ms_per_req"]["server"] for r in v])
            if headline:
                per_cpu[k] = per.med
            lines.append(
                f"| {conc} | {SERVER_LABELS.get(k, k)} | {rps[k].fmt(0)} | {sp([r['p50_ms'] for r in v]).fmt(1)} / "
                f"{sp([r['p99_ms'] for r in v]).fmt(1)} | {cpu['server'].fmt(0)} | {per.fmt(3)} | "
                f"{cpu['double'].fmt(0)} | {cpu['loadgen'].fmt(0)} |"
            )
    lines += [
        "",
        "A server near 100 % CPU is the bottleneck and 1000 / its 'CPU ms/turn' is the most one worker does on this "
        "core. The target's ratio is to the httpx forwarder (the spec's bare forwarder); the aiohttp forwarder is "
        "the same stack as the gateway's own Letta transport, shown for the gateway's overhead. "
        + transport_prose()
        + (
            f" The '{SERVER_LABELS['gateway-httpx']}' row is a second gateway process with LETTA_HTTP_CLIENT=httpx, "
            "the transport of the AWS Lambda deployment (its layer has no aiohttp); the verdict uses the default "
            "gateway."
            if "gateway-httpx" in targets
            else ""
        )
        + " The httpx forwarder calls the double through an httpx connection pool; httpcore's pool does work "
        "proportional to its connections on every request (encode/httpcore#1035, encode/httpx#3215), so its CPU "
        "per turn grows with concurrency.",
    ]
    report.detail("4 throughput", lines)
    return per_cpu


# ------------------------------------------------------------------------------------------------- 5. footprint


async def _footprint_turns(url: str, n_workers: int, cycles: int, roo: wl.Workload, small: wl.Workload) -> int:
    done = 0
    limits = httpx.Limits(max_connections=n_workers, max_keepalive_connections=n_workers)
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {wl.GATEWAY_KEY}"}, timeout=60.0, limits=limits
    ) as http:

        async def post(body: dict[str, Any]) -> dict[str, Any]:
            r = await http.post("/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text[:300]
            return r.json()  # type: ignore[no-any-return]

        async def worker(i: int) -> None:
            nonlocal done
            agent = AGENTS[f"fp-{i}"]
            for _ in range(cycles):
                await post(small.gw_plain(agent))
                await post(roo.gw_plain(agent))
                call_id = _gw_call_id(await post(small.gw_pause(agent)))
                _gw_stop(await post(small.gw_resume(agent, call_id)), "Done.")
                done += 4

        await asyncio.gather(*(worker(i) for i in range(n_workers)))
    return done


def footprint_phase(env: Env, cfg: Config, report: Report) -> None:
    env.set_delay(0.0)
    proc, url = env.start_gateway("footprint")
    try:
        time.sleep(0.5)
        init = rss_mb(proc.pid)
        small, roo = wl.small(), wl.roo()
        asyncio.run(_footprint_turns(url, 1, 1, roo, small))
        after_first = rss_mb(proc.pid)
        workers = 5
        cycles = max(1, cfg.footprint_turns // (4 * workers))
        points = [
            ("after init (server up, /health answered)", 0, init),
            ("after first cycle (4 turns)", 4, after_first),
        ]
        total = 4
        for _ in range(2):
            total += asyncio.run(_footprint_turns(url, workers, cycles, roo, small))
            points.append((f"after {total:,} turns", total, rss_mb(proc.pid)))
        hwm = 0.0
        with open(f"/proc/{proc.pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) / 1024
    finally:
        env.procs.stop(proc)
    r1, r2 = points[-2][2], points[-1][2]
    growth = r2 - r1
    flat = growth <= 1.0
    report.add(
        "5 footprint",
        "gateway RSS after init (uvicorn, `letta-gateway serve`)",
        f"{init:.1f} MB",
        "",
        "",
        "≤ 90 MB",
        verdict(init <= 90),
    )
    report.add(
        "5 footprint",
        f"RSS after {points[-2][1]:,} → {points[-1][1]:,} turns (flat = growth ≤ 1 MB)",
        f"{r1:.1f} → {r2:.1f} MB ({growth:+.2f} MB)",
        f"first cycle {after_first:.1f} MB",
        f"peak {hwm:.1f} MB",
        "flat",
        verdict(flat),
    )
    if init > 90 or not flat:
        report.failures.append("footprint RSS")
    lines = [
        "A fresh gateway process (`python -m letta_gateway.cli serve`, SQLite store), zero-latency double. Turns are "
        f"driven by {workers} concurrent clients, each on its own agent, in cycles of 4 turns: small plain, Roo-sized "
        f"plain ({len(wl.body_bytes(wl.roo().gw_plain(AGENTS['fp-0']))) / 1000:.0f} KB request), small pause, small "
        "resume. RSS = VmRSS from /proc.",
        "",
        "| point | turns | RSS MB |",
        "|---|---|---|",
        *[f"| {label} | {n:,} | {rss:.1f} |" for label, n, rss in points],
        f"| peak (VmHWM) | | {hwm:.1f} |",
    ]
    report.detail("5 footprint", lines)


def tree_size(root: Path, skip: Callable[[Path], bool] = lambda p: False) -> int:
    total = 0
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not skip(Path(dirpath) / d)]
        for name in files:
            p = Path(dirpath) / name
            if not p.is_symlink() and not skip(p):
                total += p.stat().st_size
    return total


def size_phase(env: Env, report: Report) -> None:
    log_path = os.environ.get("BENCH_TEMPLATE_CHECK_LOG")
    layer_mb = function_mb = None
    source = ""
    if log_path and os.path.isfile(log_path):
        import re

        text = Path(log_path).read_text(errors="replace")
        m1 = re.search(r"DependenciesLayer\s+unzipped:\s+([\d.]+) MB", text)
        m2 = re.search(r"GatewayFunction\s+unzipped:\s+([\d.]+) MB", text)
        if m1 and m2:
            layer_mb, function_mb = float(m1.group(1)), float(m2.group(1))
            source = f"read from `.ci/template-check` output ({log_path}): `sam build` for arm64"
    fallback = ""
    if layer_mb is None:
        try:
            layer_dir = layer_artifact(env, LAYER_PLATFORM, bytecode=True)
            function_dir = function_artifact(env)
            layer_mb, function_mb = tree_size(layer_dir) / 1e6, tree_size(function_dir) / 1e6
            source = (
                f"computed: `make -C layers/dependencies build-DependenciesLayer` (default PLATFORM={LAYER_PLATFORM}: "
                "the pinned wheels for arm64 / CPython 3.12, every .py replaced by its .pyc) and `make -C functions "
                f"build-GatewayFunction` (the package plus its .pyc), both with {runtime_python()[0]}: what `sam "
                "build` runs (template.yaml: `BuildMethod: makefile`); whole artifact dirs (the layer's including its "
                "python/) summed like `.ci/template-check` does"
            )
        except RuntimeError as error:
            fallback = str(error)
            log(f"size: the Makefile builds are unavailable ({fallback}); falling back to pip without bytecode")
    if layer_mb is None:
        target = env.tmp / "layer-pip"
        try:
            subprocess.run(
                layer_pip(procs.python(), target, LAYER_PLATFORM), check=True, capture_output=True, timeout=300
            )
            layer_mb = tree_size(target) / 1e6
            source = (
                f"computed WITHOUT bytecode, because the Makefile builds were unavailable ({fallback}): "
                "`pip install --no-compile --target` of layers/dependencies/requirements.txt for the Lambda platform "
                f"({LAYER_PLATFORM}, CPython 3.12, wheels only), plus functions/ without `__pycache__` and egg-info "
                "(sources only; the shipped artifacts replace or join them by .pyc, so their sizes differ); sizes "
                "summed like `.ci/template-check` does"
            )
        except (subprocess.SubprocessError, OSError) as error:
            stderr = getattr(error, "stderr", b"") or b""
            source = f"layer size unavailable: pip failed ({stderr.decode(errors='replace')[-300:]!r})"
        function_mb = (
            tree_size(
                ROOT / "functions",
                lambda p: p.name == "__pycache__" or p.name.endswith(".egg-info") or p.suffix == ".pyc",
            )
            / 1e6
        )
    if layer_mb is None:
        report.add("5 footprint", "layer + function unzipped", "n/a", "", "", "≤ 20 MB", "FAIL")
        report.failures.append("size unavailable")
    else:
        assert function_mb is not None
        total = layer_mb + function_mb
        report.add(
            "5 footprint",
            "Lambda layer + function, unzipped",
            f"{total:.2f} MB (layer {layer_mb:.2f} + function {function_mb:.2f})",
            f"sources only, no bytecode ({fallback[:200]})" if fallback else "",
            "",
            "≤ 20 MB",
            verdict(total <= 20.0),
        )
        if total > 20:
            report.failures.append("size")
    report.detail("5 footprint", ["", f"Layer + function size: {source}."])


# ---------------------------------------------------------------------------------------------- 6. DynamoDB ops


async def _ddb_run(double_url: str, reps: int) -> list[dict[str, dict[str, Any]]]:
    import boto3
    from moto import mock_aws

    from letta_gateway.bootstrap import build_app
    from letta_gateway.settings import Settings

    table = "letta-gateway-bench"
    out = []
    with mock_aws():
        boto3.setup_default_session(region_name="us-east-1")
        ops: list[dict[str, Any]] = []

        def before(**kw: Any) -> None:
            model = kw.get("model")
            params = kw.get("params") or {}
            body = params.get("body") or b"{}"
            try:
                req = json.loads(body)
            except (TypeError, ValueError):
                req = {}
            ops.append({"op": model.name if model else "?", "conditional": "ConditionExpression" in req})

        def after(**kw: Any) -> None:
            parsed = kw.get("parsed") or {}
            code = (parsed.get("Error") or {}).get("Code")
            if ops:
                ops[-1]["outcome"] = code or "ok"

        # Registered on the default session before any client exists: every DynamoDB client the gateway creates
        # (the pending-call backend and anything else it keeps in the table) inherits the hooks.
        session = boto3.DEFAULT_SESSION
        assert session is not None
        session.events.register("before-call.dynamodb", before)
        session.events.register("after-call.dynamodb", after)
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName=table,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        # The deployed composition (bootstrap.build_app) with the DynamoDB store, keys from the environment.
        settings = Settings.from_env(
            {
                "GATEWAY_API_KEYS": wl.GATEWAY_KEY,
                "LETTA_BASE_URL": double_url,
                "LETTA_API_KEY": wl.LETTA_KEY,
                "GATEWAY_STATE_TABLE": table,
                "GATEWAY_LOG_LEVEL": "WARNING",
            }
        )
        app = build_app(settings)
        w = wl.small()
        agent = AGENTS["ddb"]
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://gateway",
            headers={"Authorization": f"Bearer {wl.GATEWAY_KEY}"},
            timeout=30.0,
        ) as http:

            async def letta_posts() -> int:
                r = await stats.get("/_bench/stats")
                return int(r.json()["turns"])

            async def turn(body: dict[str, Any], expect: set[int]) -> tuple[dict[str, Any], dict[str, Any]]:
                before_posts = await letta_posts()
                ops.clear()
                r = await http.post("/v1/chat/completions", json=body)
                assert r.status_code in expect, (r.status_code, r.text[:300])
                seen = list(ops)
                data: dict[str, Any] = r.json() if not body.get("stream") else {"sse": r.text}
                posts = await letta_posts() - before_posts
                return {"ops": seen, "status": r.status_code, "letta_posts": posts}, data

            async with httpx.AsyncClient(base_url=double_url, timeout=10.0) as stats:
                await turn(w.gw_plain(agent), {200})  # warm-up: resolves and caches the agent, builds clients
                for _ in range(reps):
                    rec: dict[str, dict[str, Any]] = {}
                    rec["plain turn"], _ = await turn(w.gw_plain(agent), {200})
                    rec["pause (agent calls a client tool)"], data = await turn(w.gw_pause(agent), {200})
                    call_id = _gw_call_id(data)
                    rec["user message while paused"], _ = await turn(w.gw_plain(agent), {200, 409})
                    if rec["user message while paused"]["status"] == 200:
                        # this gateway answered the pending call itself (denied it) and sent the message: pause again
                        rec["pause again"], data = await turn(w.gw_pause(agent), {200})
                        call_id = _gw_call_id(data)
                    rec["resume (tool results)"], data = await turn(w.gw_resume(agent, call_id), {200})
                    _gw_stop(data, "Done.")
                    rec["replayed resume (same tool results again)"], _ = await turn(
                        w.gw_resume(agent, call_id), {200, 409}
                    )
                    rec["streamed pause"], data = await turn({**w.gw_pause(agent), "stream": True}, {200})
                    call_id = _sse_call_id(data["sse"])
                    rec["streamed resume"], _ = await turn({**w.gw_resume(agent, call_id), "stream": True}, {200})
                    out.append(rec)
    return out


def ddb_phase(env: Env, cfg: Config, report: Report) -> None:
    env.set_delay(0.0)
    runs = asyncio.run(_ddb_run(env.double_url, cfg.ddb_reps))

    def describe(ops: list[dict[str, Any]]) -> str:
        if not ops:
            return "0"
        parts = []
        for o in ops:
            cond = " (conditional)" if o["conditional"] else ""
            outcome = "" if o.get("outcome") in ("ok", None) else " → " + str(o["outcome"])
            parts.append(f"{o['op']}{cond}{outcome}")
        return f"{len(ops)}: " + ", ".join(parts)

    def writes(ops: list[dict[str, Any]]) -> int:
        return sum(1 for o in ops if o["op"] in ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"))

    def one_conditional_write(ops: list[dict[str, Any]]) -> bool:
        return len(ops) == 1 and writes(ops) == 1 and bool(ops[0]["conditional"])

    checks: dict[str, tuple[str, Callable[[list[dict[str, Any]]], bool] | None]] = {
        "plain turn": ("0 ops", lambda ops: len(ops) == 0),
        "pause (agent calls a client tool)": ("1 write", lambda ops: len(ops) == 1 and writes(ops) == 1),
        "resume (tool results)": ("1 conditional write", one_conditional_write),
        "replayed resume (same tool results again)": ("", None),
        "user message while paused": ("", None),
        "pause again": ("", None),
        "streamed pause": ("", None),
        "streamed resume": ("", None),
    }
    lines = [
        "In-process gateway built like the deployed one (`bootstrap.build_app` with GATEWAY_STATE_TABLE: the "
        "DynamoDB store; keys from GATEWAY_API_KEYS), driven through httpx's ASGITransport, on a moto (`mock_aws`) "
        "table with keys pk/sk. Operations are counted with botocore `before-call.dynamodb` / `after-call.dynamodb` "
        "hooks registered on the default boto3 session before the gateway creates its client, so every DynamoDB "
        "call of the gateway is seen; 'Letta message POSTs' are counted by the double. One warm-up plain turn, then "
        f"{cfg.ddb_reps} repetitions of the sequence below.",
        "",
        "| turn | HTTP status | DynamoDB operations (count: operations → failed condition) | Letta message POSTs |",
        "|---|---|---|---|",
    ]
    for name, (target, check) in checks.items():
        recs = [r[name] for r in runs if name in r]
        if not recs:
            continue
        per = sorted({describe(x["ops"]) for x in recs})
        statuses = sorted({x["status"] for x in recs})
        posts = sorted({x["letta_posts"] for x in recs})
        text = " / ".join(per)
        lines.append(f"| {name} | {', '.join(map(str, statuses))} | {text} | {', '.join(map(str, posts))} |")
        status = "info"
        if check is not None:
            ok = all(check(x["ops"]) for x in recs)
            status = verdict(ok)
            if not ok:
                report.failures.append(f"dynamodb {name}")
        counts = [len(x["ops"]) for x in recs]
        report.add(
            "6 DynamoDB",
            f"{name}",
            text,
            "",
            f"{statistics.median(counts):.0f} ops/turn; HTTP {', '.join(map(str, statuses))}; Letta POSTs "
            f"{', '.join(map(str, posts))}",
            target,
            status,
        )
    report.detail("6 DynamoDB", lines)


# --------------------------------------------------------------------------------------------------- profiling


def read_profile(path: Path, deadline: float) -> dict[str, Any]:
    """The profiled server's summary, once written in full: the file appears when the server opens it, before
    json.dump is done, so a read can see it empty or cut short."""
    while True:
        try:
            return dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


def profile_phase(env: Env, cfg: Config, report: Report, cpu_ms: dict[str, float]) -> None:
    try:
        import pyinstrument
    except ImportError:
        report.detail("profiles", ["pyinstrument is not installed: no profile taken (`make bench` installs it)."])
        return
    assert env.double is not None
    env.set_delay(0.0)
    two = procs.cpu_count() >= 2
    server_cpus = {0} if two else None
    harness_cpus = {1} if two else None
    agent = AGENTS["tput"]
    body = wl.body_bytes(wl.small().gw_plain(agent))
    profiles: dict[str, dict[str, Any]] = {}
    pin(env.double.pid, harness_cpus)
    try:
        for name, app, extra_env, path in (
            ("gateway", "letta_gateway.asgi:app", env.gateway_env("profile"), "/v1/chat/completions"),
            ("forwarder", "forwarder:app", child_env(LETTA_BASE_URL=env.double_url), f"/forward/{agent}"),
            (
                "forwarder-aiohttp",
                "forwarder:app",
                child_env(LETTA_BASE_URL=env.double_url, FORWARDER_CLIENT="aiohttp"),
                f"/forward/{agent}",
            ),
        ):
            port = free_port()
            out = env.out_dir / f"profile-{name}"
            for suffix in (".txt", ".json"):
                Path(str(out) + suffix).unlink(missing_ok=True)
            proc = env.procs.start(
                f"profiled-{name}",
                [
                    procs.python(),
                    str(BENCH / "profiled_server.py"),
                    "--port",
                    str(port),
                    "--out",
                    str(out),
                    "--app",
                    app,
                ],
                env=extra_env,
                cpus=server_cpus,
            )
            try:
                url = f"http://127.0.0.1:{port}"
                wait_http(f"{url}/health", proc)

                def on_window(mark: str, pid: int = proc.pid) -> None:
                    os.kill(pid, signal.SIGUSR1 if mark == "WINDOW_START" else signal.SIGUSR2)

                watch_pids = {"server": proc.pid, "double": env.double.pid}
                # 3 s of warm-up: a fresh process imports letta-client and builds its clients on first use
                warm = run_load(
                    env, f"profile-warm-{name}", f"{url}{path}", body, cfg, watch_pids, harness_cpus, duration=3.0
                )
                r = run_load(
                    env,
                    f"profile-{name}",
                    f"{url}{path}",
                    body,
                    cfg,
                    {"server": proc.pid, "double": env.double.pid},
                    harness_cpus,
                    on_window=on_window,
                    duration=cfg.profile_duration,
                )
                summary = read_profile(Path(str(out) + ".json"), time.monotonic() + 30)
                summary["requests"] = r["ok"]
                summary["rps"] = r["rps"]
                summary["cold_agent_reads"] = warm["agent_reads_total"] + r["agent_reads_total"]
                summary["window_agent_reads"] = r["agent_reads_window"]
                profiles[name] = summary
                log(f"profile/{name}: {r['ok']} requests profiled ({r['rps']:.0f}/s under the profiler)")
            finally:
                env.procs.stop(proc)
    finally:
        pin(env.double.pid, None)
    if not profiles:
        return
    lines = [
        f"pyinstrument {pyinstrument.__version__} sampling the server's event-loop thread every 1 ms (async_mode "
        f"disabled: the loop thread's real stacks) during a {cfg.profile_duration:.0f} s load window of plain small "
        "turns, same layout as the throughput test, a fresh server process each. Self time is grouped by the "
        "package of the sampled frame (C functions are charged to their caller's package); time waiting in epoll "
        "is idle and left out. Shares are of the busy samples; 'µs/turn' scales each share to the server's CPU "
        "cost per turn measured without the profiler in the throughput test, so the gateway and the forwarder "
        "columns compare directly. Full call trees: "
        + ", ".join(f"bench/out/profile-{n}.txt" for n in profiles)
        + " (regenerated by every run).",
        "",
    ]
    shares: dict[str, dict[str, float]] = {}
    for name, s in profiles.items():
        busy = sum(v for _, v in s["by_package"]) or 1.0
        shares[name] = {k: v / busy for k, v in s["by_package"]}
    order = sorted(set().union(*shares.values()), key=lambda k: -shares.get("gateway", {}).get(k, 0.0))
    ms = {n: cpu_ms.get(n, float("nan")) for n in profiles}
    g_ms = ms.get("gateway", float("nan"))
    fwds = [n for n in FORWARDERS if n in profiles]
    label = {"forwarder": "httpx forwarder", "forwarder-aiohttp": "aiohttp forwarder"}
    if "gateway" in profiles:
        lines += [
            f"The fresh gateway process profiled here, hit by {cfg.tput_concurrency} concurrent requests for one "
            f"model, made {profiles['gateway']['cold_agent_reads']} agent lookups to Letta "
            "(`GET /v1/agents/...`) in all: every request that arrived before the first lookup finished made its own "
            f"(the resolution cache lasts 30 s); {profiles['gateway']['window_agent_reads']} of them fell in the "
            "profiled window.",
            "",
        ]
    lines += [
        "Server CPU per plain turn without the profiler: "
        + ", ".join(f"{label.get(n, n)} {v:.3f} ms" for n, v in ms.items())
        + ".",
        "",
        "| package | "
        + " | ".join(f"{label.get(n, n)} share | {label.get(n, n)} µs/turn" for n in profiles)
        + "".join(f" | gateway − {label[f]} µs" for f in fwds)
        + " |",
        "|---|" + "---|---|" * len(profiles) + "---|" * len(fwds),
    ]
    for k in order:
        share = {n: shares.get(n, {}).get(k, 0.0) for n in profiles}
        if max(share.values()) < 0.01:
            continue
        us = {n: share[n] * ms[n] * 1000 for n in profiles}
        cells = [f"{share[n] * 100:.1f}% | {us[n]:.0f}" for n in profiles]
        cells += [f"{us.get('gateway', 0.0) - us[f]:+.0f}" for f in fwds]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    if "gateway" in profiles:
        s = profiles["gateway"]
        busy = sum(v for _, v in s["by_package"]) or 1.0
        lines += [
            "",
            "Gateway code, cumulative (time in the function and everything it called while on the loop thread):",
            "",
            "| function | share of busy | ≈ µs/turn |",
            "|---|---|---|",
        ]
        for fn, secs in s.get("gateway_cumulative", [])[:14]:
            lines.append(f"| `{fn}` | {secs / busy * 100:.1f}% | {secs / busy * g_ms * 1000:.0f} |")
        lines += ["", "Gateway: top functions by self time:", "", "| function | share of busy |", "|---|---|"]
        for fn, secs in s["top_functions"][:20]:
            lines.append(f"| `{fn}` | {secs / busy * 100:.1f}% |")
    report.detail("profiles", lines)


# ---------------------------------------------------------------------------------------------------- reporting


def machine() -> list[str]:
    loop, http = uvicorn_stack()
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    pkgs = []
    for name in (
        "fastapi",
        "starlette",
        "pydantic",
        "pydantic-core",
        "uvicorn",
        "h11",
        "httpx",
        "httpcore",
        "aiohttp",
        "httpx-aiohttp",
        "letta-client",
        "mangum",
        "aws-lambda-powertools",
        "boto3",
        "botocore",
        "moto",
        "pyinstrument",
        "uvloop",
        "httptools",
    ):
        try:
            pkgs.append(f"{name} {md.version(name)}")
        except md.PackageNotFoundError:
            if name in ("uvloop", "httptools", "aiohttp", "httpx-aiohttp"):
                pkgs.append(f"{name} not installed")
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "functions", "layers", "pyproject.toml"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        code = f"{commit}{' + uncommitted changes in functions/ or layers/' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        code = "unknown"
    return [
        f"- Date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Code: git {code}",
        f"- CPU: {cpu}, {os.cpu_count()} logical cores ({procs.cpu_count()} usable), {mem} RAM",
        f"- OS: {platform.system()} {platform.release()} ({platform.machine()})",
        f"- Python: {platform.python_implementation()} {platform.python_version()} ({sys.executable})",
        "- Packages: " + ", ".join(pkgs),
        f"- uvicorn runs with its defaults (`loop` / `http` auto) for every server here, which in this venv pick the "
        f"{loop} event loop and the {http} HTTP parser (uvloop / httptools when importable, else asyncio / h11).",
        f"- {transport_prose()}",
    ]


def render_table(rows: list[Row]) -> list[str]:
    out = [
        "| # | figure | gateway | baseline | ratio / difference | target | result |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(f"| {r.section} | {r.figure} | {r.gateway} | {r.baseline} | {r.ratio} | {r.target} | {r.status} |")
    return out


def print_table(rows: list[Row]) -> None:
    print()
    print("=" * 100)
    print("Letta OpenAI Gateway benchmarks")
    print("=" * 100)
    section = None
    for r in rows:
        if r.section != section:
            section = r.section
            print(f"\n[{section}]")
        status = f"[{r.status}]" if r.status else ""
        print(f"  {status:7} {r.figure}")
        print(f"          gateway : {r.gateway}")
        if r.baseline:
            print(f"          baseline: {r.baseline}")
        if r.ratio:
            print(f"          ratio   : {r.ratio}")
        if r.target:
            print(f"          target  : {r.target}")
    print()


PROPOSALS_NOTE = (
    "Where a target is missed, the profile section shows where the time goes; proposed fixes are tracked "
    "separately (the benchmark does not change the gateway)."
)


def write_doc(path: Path, cfg: Config, report: Report, elapsed: float, quick: bool) -> None:
    passed = sum(1 for r in report.rows if r.status == "PASS")
    failed = sum(1 for r in report.rows if r.status == "FAIL")
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (bench/run.py). Every figure is measured side by side with its baseline in the same "
        f"run, repeated {cfg.reps} times unless stated otherwise; cells read **median (min–max)** over the "
        "repetitions. Warm-up is excluded everywhere (amounts stated per section). Targets come from issue 8; they "
        "are reported here, not asserted by the test suite.",
        "",
        f"Result: **{passed} PASS, {failed} FAIL** (rows marked info have no target). Suite run time: "
        f"{elapsed / 60:.1f} min{' (--quick: reduced sample counts)' if quick else ''}.",
        "",
        "## Machine",
        "",
        *machine(),
        "",
        "## Summary",
        "",
        *render_table(report.rows),
        "",
    ]
    for section in (
        "1 overhead",
        "2 streaming",
        "3 cold start",
        "4 throughput",
        "5 footprint",
        "6 DynamoDB",
        "profiles",
    ):
        if section in report.details:
            title = {
                "1 overhead": "1. Overhead per turn",
                "2 streaming": "2. Streaming",
                "3 cold start": "3. Cold start",
                "4 throughput": "4. Throughput",
                "5 footprint": "5. Footprint",
                "6 DynamoDB": "6. DynamoDB operations per turn",
                "profiles": "Profiles",
            }[section]
            lines += [f"## {title}", "", *report.details[section], ""]
    if report.notes:
        lines += ["## Notes", "", *[f"- {n}" for n in report.notes], ""]
    lines += [
        "## Reproduce",
        "",
        "```bash",
        "make bench            # creates .venv if needed, installs pyinstrument, runs bench/run.py (< 10 min)",
        ".venv/bin/python bench/run.py --quick --skip-profile   # a fast smoke run (smaller samples)",
        "```",
        "",
        "Everything binds 127.0.0.1; every process the suite starts is stopped at the end, also on failure.",
        "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")


# --------------------------------------------------------------------------------------------------------- main


def wait_for_quiet(watch: procs.CpuWatch, limit_s: float, threshold: float = 0.25) -> float:
    """Wait (bounded) until other processes use less than `threshold` of a core over 2 s; return what was seen."""
    deadline = time.monotonic() + limit_s
    seen = 0.0
    while True:
        a = watch.snapshot()
        time.sleep(2.0)
        seen = watch.foreign(a, watch.snapshot())
        if seen < threshold or time.monotonic() >= deadline:
            return seen
        log(f"other processes use {seen:.2f} cores; waiting for a quieter machine (up to {limit_s:.0f} s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sample counts (smoke run)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--skip-profile", action="store_true")
    parser.add_argument(
        "--only", default="", help="comma-separated phases: overhead,stream,cold,tput,footprint,size,ddb,profile"
    )
    parser.add_argument("--functions", default="", help="benchmark another copy of functions/ (e.g. a patched one)")
    parser.add_argument(
        "--candidate", default="", help="also benchmark a gateway from this functions/ dir (before/after a patch)"
    )
    parser.add_argument("--quiet-wait", type=float, default=30.0, help="max seconds to wait for a quiet machine")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    args = parser.parse_args()
    cfg = Config.quick() if args.quick else Config()
    only = {p.strip() for p in args.only.split(",") if p.strip()}
    if args.functions:
        os.environ["BENCH_FUNCTIONS"] = str(Path(args.functions).resolve())
        sys.path.insert(0, os.environ["BENCH_FUNCTIONS"])

    def wanted(phase: str) -> bool:
        return not only or phase in only

    if args.candidate:
        os.environ["BENCH_CANDIDATE"] = os.pathsep.join(
            str(Path(x).resolve()) for x in args.candidate.split(os.pathsep) if x
        )
    started = time.perf_counter()
    report = Report()
    env = Env(keep=args.keep)
    watch = procs.CpuWatch(env.procs)
    status = 0
    background: list[tuple[str, float]] = []
    try:
        before = wait_for_quiet(watch, args.quiet_wait)
        background.append(("before the run (2 s sample)", before))
        log(f"temp dir {env.tmp}; starting the Letta double, the gateway and the forwarders")
        env.start_double()
        env.gateway, env.gateway_url = env.start_gateway("gateway")
        env.forwarder, env.forwarder_url = env.start_forwarder("forwarder")
        env.aio_forwarder, env.aio_forwarder_url = env.start_forwarder("forwarder-aiohttp", FORWARDER_CLIENT="aiohttp")
        if env.candidate_dir:
            env.candidate, env.candidate_url = env.start_gateway("candidate", functions=env.candidate_dir)
        if (wanted("overhead") or wanted("tput")) and gateway_transport() != "httpx":
            # the AWS Lambda deployment's transport (its layer has no aiohttp), measured next to the default one
            env.httpx_gateway, env.httpx_gateway_url = env.start_gateway("gateway-httpx", LETTA_HTTP_CLIENT="httpx")
        tput_cpu: dict[str, float] = {}
        phases: list[tuple[str, Callable[[], Any]]] = [
            ("overhead", lambda: asyncio.run(overhead_phase(env, cfg, report))),
            ("stream", lambda: asyncio.run(streaming_phase(env, cfg, report))),
            ("cold", lambda: cold_phase(env, cfg, report)),
            ("tput", lambda: tput_cpu.update(throughput_phase(env, cfg, report))),
            ("footprint", lambda: footprint_phase(env, cfg, report)),
            ("size", lambda: size_phase(env, report)),
            ("ddb", lambda: ddb_phase(env, cfg, report)),
        ]
        if not args.skip_profile:
            phases.append(("profile", lambda: profile_phase(env, cfg, report, tput_cpu)))
        for name, fn in phases:
            if not wanted(name):
                continue
            t0 = time.perf_counter()
            log(f"phase {name} ...")
            snap = watch.snapshot()
            try:
                fn()
            except Exception as error:
                traceback.print_exc()
                report.add(name, f"phase {name} failed", repr(error)[:200], "", "", "", "FAIL")
                report.failures.append(f"phase {name} crashed")
                status = 1
            other = watch.foreign(snap, watch.snapshot())
            background.append((name, other))
            log(f"phase {name} done in {time.perf_counter() - t0:.1f}s (other processes: {other:.2f} cores)")
    finally:
        env.close()
    elapsed = time.perf_counter() - started
    report.notes.append(
        "CPU used by processes outside the benchmark (the machine is shared; the suite cannot stop them), average "
        "in cores: "
        + ", ".join(f"{n} {v:.2f}" for n, v in background)
        + ". Figures from phases with a high value are less reliable."
    )
    if env.candidate_dir:
        report.notes.append(f"'candidate' = the gateway served from {env.candidate_dir} (a proposed patch).")
    if os.environ.get("BENCH_FUNCTIONS"):
        report.notes.append(f"Gateway code benchmarked from {os.environ['BENCH_FUNCTIONS']} (not this checkout).")
    print_table(report.rows)
    write_doc(Path(args.out), cfg, report, elapsed, args.quick)
    passed = sum(1 for r in report.rows if r.status == "PASS")
    failed = sum(1 for r in report.rows if r.status == "FAIL")
    print(f"{passed} PASS, {failed} FAIL; wrote {args.out}; run time {elapsed:.0f} s")
    return status


if __name__ == "__main__":
    raise SystemExit(main())

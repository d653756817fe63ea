"""The Letta double (tests/support/letta_double.py, Letta 0.16.8 wire shapes) served by uvicorn on loopback in its
own process, for benchmarks.

Differences from the test fixture, all to keep a long benchmark run bounded: requests are not recorded and agent
histories are not kept. A small control route sets the latency:

    POST /_bench/config {"delay": 0.02}     # seconds; per turn (non-streamed) or per streamed token event

Usage: python bench/letta_server.py --port P --agents agents.json [--delay 0.02]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, Response  # noqa: E402
from starlette.routing import Route  # noqa: E402
from tests.support.letta_double import Fault, LettaDouble  # noqa: E402

MAX_RUNS = 2000


class BenchDouble(LettaDouble):
    def __init__(self) -> None:
        super().__init__()
        self.turns = 0
        self.agent_reads = 0
        self.app.router.routes.append(Route("/_bench/config", self._config, methods=["POST"]))
        self.app.router.routes.append(Route("/_bench/stats", self._stats, methods=["GET"]))

    async def _get_agent(self, request: Request) -> Response:
        self.agent_reads += 1
        return await super()._get_agent(request)

    async def _list_agents(self, request: Request) -> Response:
        self.agent_reads += 1
        return await super()._list_agents(request)

    # The overrides take any arguments: the double's internals evolve with the test suite.

    def _record(self, *args: Any, **kwargs: Any) -> Fault | None:
        """Count message POSTs; keep no request log (a long run would grow it without bound); no faults."""
        self.turns += 1
        return None

    def _turn(self, *args: Any, **kwargs: Any) -> Any:
        outcome = super()._turn(*args, **kwargs)
        with self._lock:
            for agent in self.agents.values():  # agent histories would grow without bound too
                agent.history.clear()
            runs = getattr(self, "runs", None)  # finished runs, read back on replays: keep the recent ones
            if isinstance(runs, dict) and len(runs) > MAX_RUNS:
                for key in list(runs)[: len(runs) - MAX_RUNS]:
                    runs.pop(key, None)
        return outcome

    async def _config(self, request: Request) -> Response:
        data = await request.json()
        if "delay" in data:
            self.delay = float(data["delay"])
        return JSONResponse({"delay": self.delay})

    async def _stats(self, request: Request) -> Response:
        return JSONResponse({"turns": self.turns, "agent_reads": self.agent_reads, "delay": self.delay})


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--agents", required=True, help="JSON file: [{id, name, parallel?}]")
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    double = BenchDouble()
    double.delay = args.delay
    for spec in json.loads(Path(args.agents).read_text()):
        double.add_agent(spec["name"], agent_id=spec["id"], parallel=bool(spec.get("parallel")))
    uvicorn.run(
        double.app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_keep_alive=75,
    )


if __name__ == "__main__":
    main()

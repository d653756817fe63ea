"""Load generator (its own process): httpx async, bounded concurrency, bounded duration and request count.

Each of `--concurrency` workers POSTs the body in a loop over its own keep-alive httpx.AsyncClient (one connection
each; see below). Requests that start after the warm-up and finish before the end of the window are counted.
Prints `WINDOW_START` / `WINDOW_END` when the measured window opens and closes (the parent samples CPU times then),
then one `RESULT {json}` line.

Usage: python bench/loadgen.py --url URL --body-file F [--header 'K: V'] --concurrency 32 --warmup 1 --duration 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import httpx


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = max(0, min(len(values) - 1, round(q / 100 * (len(values) - 1))))
    return values[k]


async def run(args: argparse.Namespace, body: bytes) -> dict[str, object]:
    headers = {"content-type": "application/json"}
    for h in args.header:
        k, _, v = h.partition(":")
        headers[k.strip()] = v.strip()
    per_client = args.concurrency if args.shared_client else 1
    limits = httpx.Limits(max_connections=per_client, max_keepalive_connections=per_client)
    started = time.perf_counter()
    warm_end = started + args.warmup
    end = warm_end + args.duration
    hard_deadline = end + 30.0
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    errors: list[str] = []
    budget = {"left": args.max_requests}
    marks: dict[str, float] = {}

    # One client (one keep-alive connection) per worker: httpcore's pool does work proportional to its number of
    # connections on every request, so a single shared 32-connection pool would make the load generator the
    # bottleneck. Set --shared-client to use one client for all workers instead.
    clients = [
        httpx.AsyncClient(timeout=httpx.Timeout(30.0), limits=limits)
        for _ in range(1 if args.shared_client else args.concurrency)
    ]
    try:

        async def worker(i: int) -> None:
            client = clients[i % len(clients)]
            while budget["left"] > 0:
                now = time.perf_counter()
                if now >= end or now >= hard_deadline:
                    return
                budget["left"] -= 1
                t0 = time.perf_counter()
                try:
                    response = await client.post(args.url, content=body, headers=headers)
                    await response.aread()
                    code = str(response.status_code)
                except Exception as error:  # counted, never retried
                    code = type(error).__name__
                    if len(errors) < 5:
                        errors.append(repr(error)[:200])
                t1 = time.perf_counter()
                if t0 >= warm_end and t1 <= end:
                    statuses[code] = statuses.get(code, 0) + 1
                    if code == "200":
                        latencies.append(t1 - t0)

        async def marker() -> None:
            await asyncio.sleep(max(0.0, warm_end - time.perf_counter()))
            marks["start"] = time.perf_counter()
            print("WINDOW_START", flush=True)
            await asyncio.sleep(max(0.0, end - time.perf_counter()))
            marks["end"] = time.perf_counter()
            print("WINDOW_END", flush=True)

        await asyncio.wait_for(
            asyncio.gather(marker(), *(worker(i) for i in range(args.concurrency))),
            timeout=args.warmup + args.duration + 45.0,
        )
    finally:
        for client in clients:
            await client.aclose()
    window = marks["end"] - marks["start"]
    ok = statuses.get("200", 0)
    return {
        "ok": ok,
        "statuses": statuses,
        "errors": errors,
        "window_s": window,
        "rps": ok / window if window > 0 else 0.0,
        "p50_ms": _pct(latencies, 50) * 1000,
        "p99_ms": _pct(latencies, 99) * 1000,
        "concurrency": args.concurrency,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--body-file", required=True)
    parser.add_argument("--header", action="append", default=[])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--max-requests", type=int, default=200_000)
    parser.add_argument("--shared-client", action="store_true", help="one httpx client for all workers")
    args = parser.parse_args()
    with open(args.body_file, "rb") as fh:
        body = fh.read()
    result = asyncio.run(run(args, body))
    print("RESULT " + json.dumps(result), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()

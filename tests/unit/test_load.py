"""Bounded load on loopback: 200 concurrent conversations, each a full tool round trip, against the Letta double.

Asserts correctness only (no errors, every resume sent exactly once, the store consistent); prints throughput and
latency for the record."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable

import httpx
import openai

from letta_gateway.store.base import thread_key
from tests.conftest import ALICE, make_gateway
from tests.support.letta_double import LettaDouble

CONVERSATIONS = 200
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}}}]


def test_200_concurrent_tool_round_trips(
    serve: Callable[..., str], letta_url: str, backend_factory, letta: LettaDouble
) -> None:
    agents = [letta.add_agent(f"load-{i:03d}") for i in range(CONVERSATIONS)]
    backend = backend_factory()
    url = serve(make_gateway(letta_url, backend))
    latencies: list[float] = []

    async def conversation(client: openai.AsyncOpenAI, i: int) -> str:
        messages = [{"role": "user", "content": f'CALL:read_file {{"n": {i}}}'}]
        started = time.perf_counter()
        first = await client.chat.completions.create(model=f"load-{i:03d}", messages=messages, tools=TOOLS)
        latencies.append(time.perf_counter() - started)
        call = first.choices[0].message.tool_calls[0]
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": f"result-{i}"},
        ]
        started = time.perf_counter()
        second = await client.chat.completions.create(
            model=f"load-{i:03d}", messages=messages, tools=TOOLS, stream=i % 2 == 0
        )
        if i % 2 == 0:
            text = ""
            async for chunk in second:
                text += "".join(c.delta.content or "" for c in chunk.choices)
        else:
            text = second.choices[0].message.content
        latencies.append(time.perf_counter() - started)
        return text

    async def main() -> tuple[list[str | BaseException], float]:
        limits = httpx.Limits(
            max_connections=CONVERSATIONS, max_keepalive_connections=CONVERSATIONS, keepalive_expiry=2.0
        )
        # Clients retry as real ones do (connection errors, 409 resume_in_progress): every resume must still reach
        # Letta exactly once.
        async with openai.AsyncOpenAI(
            base_url=f"{url}/v1",
            api_key=ALICE,
            max_retries=2,
            timeout=60,
            http_client=httpx.AsyncClient(limits=limits, timeout=60),
        ) as client:
            started = time.perf_counter()
            results = await asyncio.wait_for(
                asyncio.gather(*(conversation(client, i) for i in range(CONVERSATIONS)), return_exceptions=True),
                timeout=120,
            )
            return results, time.perf_counter() - started

    results, elapsed = asyncio.run(main())
    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors == []
    assert [r.endswith(f"=result-{i}") for i, r in enumerate(results)] == [True] * CONVERSATIONS
    assert [len(letta.approvals_received(a.id)) for a in agents] == [1] * CONVERSATIONS
    records = [backend.get(thread_key(a.id, None)) for a in agents]
    # every pause claimed exactly once; a claim stays as it is unless a retry had Letta confirm it (then done)
    assert {r.status for r in records if r is not None} <= {"resuming", "done"} and None not in records
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    print(
        f"\nload: {CONVERSATIONS} conversations, {2 * CONVERSATIONS} requests in {elapsed:.2f} s "
        f"({2 * CONVERSATIONS / elapsed:.0f} req/s); latency p50 {statistics.median(latencies) * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms (gateway, Letta double and clients share one process)"
    )

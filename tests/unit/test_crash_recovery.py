"""A request that claimed tool results and died (Lambda killed between claim and answer): the next retry asks Letta
what happened instead of failing or sending twice."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import openai
import pytest

from letta_gateway.auth import key_id_of
from letta_gateway.store import PendingApprovals
from tests.conftest import ALICE, make_gateway
from tests.support.letta_double import LettaDouble

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}}}]


@pytest.mark.parametrize("letta_got_it", [False, True])
def test_retry_after_a_crashed_resume(
    serve: Callable[..., str], letta_url: str, backend_factory, letta: LettaDouble, letta_got_it: bool
) -> None:
    agent = letta.add_agent("coder")
    backend = backend_factory()
    url = serve(make_gateway(letta_url, backend))
    with openai.OpenAI(base_url=f"{url}/v1", api_key=ALICE, max_retries=0) as client:
        messages = [{"role": "user", "content": "CALL:read_file {}"}]
        first = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
        call = first.choices[0].message.tool_calls[0]
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "CRASH-BODY"},
        ]
        # A request claimed the results 20 minutes ago and its process died...
        dead = PendingApprovals(backend, clock=lambda: time.time() - 1200)
        dead.claim(owner=key_id_of(ALICE), agent_id=agent.id, conversation_id=None, tool_call_ids=[call.id])
        if letta_got_it:  # ...after Letta had accepted them
            httpx.post(
                f"{letta_url}/v1/agents/{agent.id}/messages",
                json={
                    "messages": [
                        {
                            "type": "approval",
                            "approvals": [
                                {
                                    "type": "tool",
                                    "tool_call_id": call.id,
                                    "tool_return": "CRASH-BODY",
                                    "status": "success",
                                }
                            ],
                        }
                    ]
                },
            ).raise_for_status()
        posts = len(letta.requests)
        retry = client.chat.completions.create(model="coder", messages=messages, tools=TOOLS)
    assert retry.choices[0].message.content == f"Done. Tool results: {call.id}=CRASH-BODY"
    assert len(letta.approvals_received(agent.id)) == 1  # sent exactly once, by whichever request got through
    assert len(letta.requests) == posts + (0 if letta_got_it else 1)

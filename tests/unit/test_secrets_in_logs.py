"""No gateway key or Letta key ever reaches the logs or a response, whatever happens."""

from __future__ import annotations

import logging

import openai
import pytest

from tests.conftest import ALICE, BOB, LETTA_KEY
from tests.support.letta_double import LettaDouble

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}}}]


def test_a_busy_session_logs_no_secret(gateway_url: str, letta: LettaDouble, caplog, capfd) -> None:
    caplog.set_level(logging.DEBUG)
    letta.add_agent("coder")
    bodies: list[str] = []
    with openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=ALICE, max_retries=0) as c:
        c.models.list()
        first = c.chat.completions.create(
            model="coder", tools=TOOLS, messages=[{"role": "user", "content": "CALL:read_file {}"}]
        )
        call = first.choices[0].message.tool_calls[0]
        c.chat.completions.create(
            model="coder",
            tools=TOOLS,
            stream=True,
            messages=[
                {"role": "user", "content": "x"},
                first.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "r"},
            ],
        ).close()
        letta.fail_next(401, {"detail": "bad key"})
        with pytest.raises(openai.APIStatusError) as info:
            c.chat.completions.create(model="coder", messages=[{"role": "user", "content": "x"}])
        bodies.append(info.value.response.text)
    for key in ("wrong-" + ALICE, BOB + "x"):
        with openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=key, max_retries=0) as c:
            with pytest.raises(openai.AuthenticationError) as auth:
                c.models.list()
            bodies.append(auth.value.response.text)
    captured = capfd.readouterr()
    records = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    everything = "\n".join([records, captured.out, captured.err, *bodies])
    assert "key_id" in records  # the logs do identify the caller, by a non-secret id
    for secret in (ALICE, BOB, LETTA_KEY):
        assert secret not in everything
        assert secret[:12] not in everything

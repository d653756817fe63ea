"""Helper requests of the clients (Roo's condense and prompt enhancement, Open WebUI's titles) run in a temporary
conversation that is removed afterwards: they leave no trace in the agent's threads."""

from __future__ import annotations

import openai
import pytest

from letta_gateway.settings import Settings
from tests.support.letta_double import LettaDouble

CONDENSE = (
    "Your task is to create a detailed summary of the conversation so far, paying close attention to the "
    "user's explicit requests and your previous actions."
)
ENHANCE = (
    "Generate an enhanced version of this prompt (reply with only the enhanced prompt - no conversation, "
    "explanations, lead-in, bullet points, placeholders, or surrounding quotes):\n\nSAY:better prompt"
)
TITLE = "### Task:\nGenerate a concise, 3-5 word title with an emoji summarizing the chat history.\nSAY:A Title"


@pytest.mark.parametrize(
    ("messages", "stream"),
    [
        pytest.param(
            [
                {"role": "system", "content": CONDENSE},
                {"role": "user", "content": "SAY:the summary"},
                {"role": "assistant", "content": "earlier"},
                {"role": "user", "content": "more"},
            ],
            True,
            id="roo-condense",
        ),
        pytest.param([{"role": "user", "content": ENHANCE}], False, id="roo-enhance"),
        pytest.param([{"role": "user", "content": TITLE}], False, id="open-webui-title"),
    ],
)
def test_side_requests_leave_no_trace(
    client: openai.OpenAI, letta: LettaDouble, messages: list[dict], stream: bool
) -> None:
    agent = letta.add_agent("coder")
    reply = client.chat.completions.create(model="coder", messages=messages, stream=stream)
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in reply if c.choices)
    else:
        text = reply.choices[0].message.content
    assert text
    assert agent.history == [] and agent.pending is None  # the default thread saw nothing
    assert letta.conversations == {} and len(letta.deleted_conversations) == 1  # the temporary thread is gone
    [post] = letta.requests
    assert post["conversation_id"] == letta.deleted_conversations[0]
    [sent] = post["body"]["messages"]
    assert "client_tools" not in post["body"] and messages[-1]["content"][:40] in sent["content"]


def test_requests_with_tools_are_never_side_requests(client: openai.OpenAI, letta: LettaDouble) -> None:
    agent = letta.add_agent("coder")
    tools = [{"type": "function", "function": {"name": "read_file"}}]
    client.chat.completions.create(model="coder", tools=tools, messages=[{"role": "user", "content": TITLE}])
    assert letta.deleted_conversations == [] and len(agent.history) == 1


def test_rules_are_configurable() -> None:
    assert Settings.from_env(
        {"GATEWAY_API_KEYS": "k", "LETTA_API_KEY": "l", "GATEWAY_SIDE_REQUEST_PATTERNS": '["^Summarize"]'}
    ).side_request_patterns == ("^Summarize",)
    assert (
        Settings.from_env(
            {"GATEWAY_API_KEYS": "k", "LETTA_API_KEY": "l", "GATEWAY_SIDE_REQUEST_PATTERNS": "off"}
        ).side_request_patterns
        == ()
    )

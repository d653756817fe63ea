"""OpenAI-compatible gateway in front of stateful Letta agents."""

__version__ = "0.1.0"

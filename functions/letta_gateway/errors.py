"""Domain errors and their OpenAI error envelope.

Every failure the gateway reports is one of these classes. The domain raises them; the HTTP layer turns them
into `{"error": {"message", "type", "param", "code"}}` with the status carried by the class, in one place.
"""

from __future__ import annotations

from typing import Any


class GatewayError(Exception):
    status_code: int = 500
    type: str = "server_error"
    code: str | None = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        self.headers = headers or {}

    def envelope(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class InvalidRequest(GatewayError):
    status_code = 400
    type = "invalid_request_error"
    code = "invalid_request"


class AuthenticationFailed(GatewayError):
    status_code = 401
    type = "authentication_error"
    code = "invalid_api_key"


class NotFound(GatewayError):
    status_code = 404
    type = "invalid_request_error"
    code = "not_found"


class ModelNotFound(NotFound):
    code = "model_not_found"

    def __init__(self, model: str) -> None:
        super().__init__(
            f"The model '{model}' does not exist or you do not have access to it. "
            "Use a Letta agent id or a unique agent name (GET /v1/models lists them).",
            param="model",
        )


class MethodNotAllowed(GatewayError):
    status_code = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class PayloadTooLarge(GatewayError):
    status_code = 413
    type = "invalid_request_error"
    code = "request_too_large"


class Conflict(GatewayError):
    status_code = 409
    type = "invalid_request_error"
    code = "conflict"


class RateLimited(GatewayError):
    status_code = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"


class UpstreamError(GatewayError):
    """Letta failed or answered with something the gateway cannot use."""

    status_code = 502
    type = "api_error"
    code = "upstream_error"


class UpstreamTimeout(UpstreamError):
    status_code = 504
    code = "upstream_timeout"


class AgentError(UpstreamError):
    """The agent's run ended in an error stop reason."""

    code = "agent_error"


class ConfigurationError(Exception):
    """Invalid deployment configuration; raised at startup with what to set."""

"""Structured JSON logs (Powertools Logger) with per-request context kept in a context variable, so concurrent
requests on one event loop never mix their fields. Secrets are never passed here."""

from __future__ import annotations

import contextvars
import logging
import os
import random
from collections.abc import Mapping
from typing import Any

SERVICE = "letta-gateway"
ENTRY = os.environ.get("GATEWAY_ENTRY") or "uvicorn"  # mangum | lwa | uvicorn: which entry serves this process

_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("request_log_context", default=None)
_logger: Any = None


def logger(level: str | None = None) -> Any:
    global _logger
    if _logger is None:
        from aws_lambda_powertools import Logger

        _logger = Logger(service=SERVICE, level=level or "INFO", log_uncaught_exceptions=False)
    elif level:
        _logger.setLevel(level)
    return _logger


_usage: contextvars.ContextVar[dict[str, int] | None] = contextvars.ContextVar("request_usage", default=None)
_caller: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("request_caller", default=None)


def begin_request(correlation_id: str | None) -> dict[str, Any]:
    fields = {"correlation_id": correlation_id or f"{random.getrandbits(128):032x}", "entry": ENTRY}
    _context.set(fields)
    _usage.set({})
    _caller.set({})
    return fields


def set_caller(**details: Any) -> None:
    """Who this request is for (kept out of the logs): read back by `caller()` when the request ends."""
    current = _caller.get()
    if current is not None:
        current.update(details)


def caller() -> dict[str, Any]:
    return dict(_caller.get() or {})


def count(**counters: int) -> None:
    """Add to this request's usage counters (recorded per key at the end of the request)."""
    usage = _usage.get()
    if usage is not None:
        for name, value in counters.items():
            usage[name] = usage.get(name, 0) + value


def request_usage() -> dict[str, int]:
    return dict(_usage.get() or {})


def bind(**fields: Any) -> None:
    current = _context.get()
    if current is not None:
        current.update({k: v for k, v in fields.items() if v is not None})


def _extra(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {**(_context.get() or {}), **fields}


def info(message: str, **fields: Any) -> None:
    logger().info(message, extra=_extra(fields))


def warning(message: str, **fields: Any) -> None:
    logger().warning(message, extra=_extra(fields))


def error(message: str, *, exc_info: bool = False, **fields: Any) -> None:
    logger().error(message, extra=_extra(fields), exc_info=exc_info)


# ----------------------------------------------------------------------------------------------- metrics
# CloudWatch embedded-metric-format lines on stdout (Powertools Metrics), flushed once per request. Both entries
# (Mangum and the Lambda Web Adapter) write stdout to the function's log group, where CloudWatch extracts them.

_metrics: Any = None
_pending_metrics = False
METRICS_ENABLED = os.environ.get("GATEWAY_METRICS", "").lower() in ("1", "true", "yes", "on") or bool(
    os.environ.get("AWS_LAMBDA_FUNCTION_NAME")
)


def _metrics_provider() -> Any:
    global _metrics
    if _metrics is None:
        from aws_lambda_powertools import Metrics

        _metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "LettaGateway", service=SERVICE)
    return _metrics


def metric(name: str, value: float = 1, unit: str = "Count") -> None:
    """Count turns, tool pauses, resumes, errors; time Letta (unit `Milliseconds`)."""
    global _pending_metrics
    if METRICS_ENABLED:
        _metrics_provider().add_metric(name=name, unit=unit, value=value)
        _pending_metrics = True


def flush_metrics() -> None:
    global _pending_metrics
    if _pending_metrics:
        _pending_metrics = False
        _metrics_provider().flush_metrics()


def quiet_libraries() -> None:
    for name in ("httpx", "httpcore", "botocore", "boto3", "urllib3", "letta_client"):
        logging.getLogger(name).setLevel(logging.WARNING)

"""Pending tool-call state store: one policy (`PendingApprovals`), DynamoDB and SQLite backends."""

from .base import (
    PendingApprovals,
    PendingBackend,
    PendingRecord,
    ResumeInProgress,
    ToolCallEntry,
    ToolCallsNotFound,
    ToolResultsAlreadySubmitted,
)

__all__ = [
    "PendingApprovals",
    "PendingBackend",
    "PendingRecord",
    "ResumeInProgress",
    "ToolCallEntry",
    "ToolCallsNotFound",
    "ToolResultsAlreadySubmitted",
]

"""Pending tool-call state store: one policy (`PendingApprovals`), DynamoDB and SQLite backends."""

from .base import (
    AlreadyAnswered,
    PendingApprovals,
    PendingBackend,
    PendingRecord,
    ResumeInProgress,
    ResumeUnconfirmed,
    StaleResume,
    ToolCallEntry,
    ToolCallsNotFound,
    ToolResultsAlreadySubmitted,
)

__all__ = [
    "AlreadyAnswered",
    "PendingApprovals",
    "PendingBackend",
    "PendingRecord",
    "ResumeInProgress",
    "ResumeUnconfirmed",
    "StaleResume",
    "ToolCallEntry",
    "ToolCallsNotFound",
    "ToolResultsAlreadySubmitted",
]

"""Composition: settings -> store, Letta client, credentials -> Gateway -> app. No I/O until first use."""

from __future__ import annotations

from fastapi import FastAPI

from . import observability as log
from .agents import LettaAgents
from .app import create_app
from .credentials import credential_source
from .service import Gateway, Options
from .settings import Settings
from .store import PendingApprovals, PendingBackend


def build_backend(settings: Settings) -> PendingBackend:
    if settings.state_table:
        from .store.dynamodb import DynamoDBBackend

        return DynamoDBBackend(settings.state_table)
    from .store.sqlite import SQLiteBackend

    return SQLiteBackend(settings.state_path)


def build_gateway(settings: Settings) -> Gateway:
    approvals = PendingApprovals(build_backend(settings), ttl_seconds=settings.pending_ttl_seconds)
    return Gateway(
        LettaAgents(settings), approvals, credential_source(settings), options=Options.from_settings(settings)
    )


def build_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_env()
    log.logger(settings.log_level)
    log.quiet_libraries()
    return create_app(
        lambda: build_gateway(settings),
        max_body_bytes=settings.max_body_bytes,
        deadline_seconds=settings.deadline_seconds,
        deadline_margin_seconds=settings.deadline_margin_seconds,
    )

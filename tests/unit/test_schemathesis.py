"""Property-based requests generated from the app's own OpenAPI schema: no 5xx, no response outside the schema."""

from __future__ import annotations

from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from letta_gateway.app import create_app
from letta_gateway.service import Gateway
from letta_gateway.store.sqlite import SQLiteBackend
from tests.conftest import ALICE, make_gateway
from tests.support.letta_double import LettaDouble

MAX_EXAMPLES = 60
_target: dict[str, str] = {}


def _gateway() -> Gateway:
    return make_gateway(_target["letta_url"], SQLiteBackend(_target["state"]))


APP = create_app(_gateway)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@pytest.fixture(autouse=True)
def _letta(letta_url: str, letta: LettaDouble, tmp_path_factory: pytest.TempPathFactory) -> None:
    _target.setdefault("state", str(Path(tmp_path_factory.mktemp("schemathesis")) / "state.sqlite3"))
    _target["letta_url"] = letta_url
    letta.add_agent("coder")


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_generated_requests(case) -> None:
    case.call_and_validate(
        headers={"Authorization": f"Bearer {ALICE}"},
        checks=[not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance],
    )

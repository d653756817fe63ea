from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "functions"))

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

from letta_gateway.agents import LettaAgents  # noqa: E402
from letta_gateway.app import create_app  # noqa: E402
from letta_gateway.credentials import Credentials, StaticCredentials  # noqa: E402
from letta_gateway.service import Gateway, Options  # noqa: E402
from letta_gateway.settings import Settings  # noqa: E402
from letta_gateway.store import PendingApprovals, PendingBackend  # noqa: E402
from letta_gateway.store.dynamodb import DynamoDBBackend  # noqa: E402
from letta_gateway.store.sqlite import SQLiteBackend  # noqa: E402
from tests.support.letta_double import LettaDouble  # noqa: E402
from tests.support.live import LiveServer  # noqa: E402

ALICE = "sk-test-alice-0123456789"
KEY_SECRET = "test-key-hashing-secret-0123456789"
BOB = "sk-test-bob-9876543210"
LETTA_KEY = "letta-secret-for-tests-42"
TABLE = "letta-gateway-test"


class _LogCollector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.getMessage()} {json.dumps(record.__dict__, default=str)}")


@pytest.fixture(scope="session", autouse=True)
def no_secret_reaches_the_logs() -> Iterator[None]:
    """Every log record of the whole session is scanned for every secret the suite uses."""
    collector = _LogCollector()
    logging.getLogger().addHandler(collector)
    yield
    logging.getLogger().removeHandler(collector)
    text = "\n".join(collector.lines)
    for secret in (ALICE, BOB, LETTA_KEY, KEY_SECRET):
        assert secret not in text, "a secret used by the tests reached the logs"
    assert not re.search(r"lgw_[A-Za-z0-9_-]{20,}", text), "a managed gateway key reached the logs"


def create_table(client, name: str = TABLE) -> None:
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )


class AtomicItems:
    """moto evaluates a condition and writes without a lock, so two threads can both pass one condition; real
    DynamoDB applies each conditional write atomically. This proxy restores that by serialising the calls."""

    def __init__(self, client: object) -> None:
        self._client = client
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> object:
        attr = getattr(self._client, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def call(*args: object, **kwargs: object) -> object:
            with self._lock:
                return attr(*args, **kwargs)

        return call


@pytest.fixture
def dynamodb_client() -> Iterator[object]:
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_table(client)
        yield AtomicItems(client)


@pytest.fixture(params=["sqlite", "dynamodb"])
def backend_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], PendingBackend]:
    """Builds independent backend instances that share one underlying store (a file, a table)."""
    if request.param == "sqlite":
        path = str(tmp_path / "state.sqlite3")
        return lambda: SQLiteBackend(path)
    client = request.getfixturevalue("dynamodb_client")
    return lambda: DynamoDBBackend(TABLE, client=client)


@pytest.fixture(scope="session")
def letta_server() -> Iterator[tuple[LettaDouble, str]]:
    double = LettaDouble()
    with LiveServer(double.app) as server:
        yield double, server.url


@pytest.fixture
def letta(letta_server: tuple[LettaDouble, str]) -> LettaDouble:
    double, _ = letta_server
    double.reset()
    return double


@pytest.fixture
def letta_url(letta_server: tuple[LettaDouble, str]) -> str:
    return letta_server[1]


HTTP_CLIENTS = ("aiohttp", "httpx")  # the Letta transports: aiohttp where installed, httpx in the Lambda layer


def make_gateway(letta_url: str, backend: PendingBackend, **overrides: object) -> Gateway:
    http_client = overrides.pop("http_client", None) or Settings().letta_http_client
    settings = Settings(
        letta_base_url=letta_url,
        letta_api_key=LETTA_KEY,
        gateway_api_keys=(ALICE, BOB),
        letta_timeout_seconds=float(overrides.pop("timeout", 30.0)),  # type: ignore[arg-type]
        letta_http_client=str(http_client),
    )
    key_secret = overrides.pop("key_secret", None)
    credentials = StaticCredentials(Credentials(LETTA_KEY, (ALICE, BOB), key_secret))  # type: ignore[arg-type]
    keepalive = float(overrides.pop("keepalive", 10.0))  # type: ignore[arg-type]
    options = Options(keepalive_seconds=keepalive, key_cache_seconds=float(overrides.pop("key_cache", 30.0)))  # type: ignore[arg-type]
    return Gateway(LettaAgents(settings), PendingApprovals(backend), credentials, options=options)


@pytest.fixture
def letta_http_client() -> str:
    """The gateway's Letta transport: the installed default; transport-sensitive modules run both."""
    return Settings().letta_http_client


@pytest.fixture
def gateway_factory(
    letta_url: str, backend_factory: Callable[[], PendingBackend], letta_http_client: str
) -> Callable[[], Gateway]:
    return lambda: make_gateway(letta_url, backend_factory(), http_client=letta_http_client)


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    servers: list[LiveServer] = []

    def start(gateway: Gateway, **app_options: object) -> str:
        server = LiveServer(create_app(gateway, **app_options)).__enter__()  # type: ignore[arg-type]
        servers.append(server)
        return server.url

    yield start
    for server in servers:
        server.__exit__()


@pytest.fixture
def gateway_url(serve: Callable[[Gateway], str], gateway_factory: Callable[[], Gateway]) -> str:
    return serve(gateway_factory())


@pytest.fixture
def client(gateway_url: str):
    import openai

    with openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=ALICE, max_retries=0, timeout=30) as c:
        yield c

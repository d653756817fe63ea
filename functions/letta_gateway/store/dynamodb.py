"""DynamoDB backend: conditional writes state the invariants; a failed condition returns the item as it was.

Table: partition key `pk` (S), sort key `sk` (S), TTL attribute `ttl` (epoch seconds). TTL deletion is lazy, so
every condition also requires `ttl > now` and the policy treats expired items as absent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .base import Changes, ConditionFailed, Expect, PendingRecord, record_from_dict, record_to_dict

PENDING_SK = "pending"
MARKER_SK = "marker"
# A plain item may be created only where none is.
ITEM_ABSENT = "attribute_not_exists(pk)"
# A marker may be written only where none is, or where the one there has expired (TTL deletes lazily).
MARKER_ABSENT = "attribute_not_exists(pk) OR #ttl <= :now"

# The record is in the expected state, belongs to the caller, answers the same tool calls, and has not expired.
TRANSITION_CONDITION = "#status = :expect_status AND #owner = :owner AND #ttl > :now"
SAME_TOOL_CALLS = " AND #ids = :ids"
# ...and nobody changed it since it was read (taking over a stale claim).
UNCHANGED = " AND #updated = :expect_updated"


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _n(value: int) -> dict[str, str]:
    return {"N": str(value)}


def to_item(record: PendingRecord) -> dict[str, Any]:
    data = record_to_dict(record)
    item: dict[str, Any] = {
        "pk": _s(record.thread_key),
        "sk": _s(PENDING_SK),
        "owner": _s(record.owner),
        "status": _s(record.status),
        "ids": _s(record.ids_key),
        "ttl": _n(record.expires_at),
        "updated_at": _n(record.updated_at),
        "body": _s(json.dumps({k: v for k, v in data.items() if k not in ("status", "updated_at", "resume_run_id")})),
    }
    if record.resume_run_id is not None:
        item["resume_run_id"] = _s(record.resume_run_id)
    return item


def from_item(item: dict[str, Any]) -> PendingRecord:
    data = json.loads(item["body"]["S"])
    data["status"] = item["status"]["S"]
    data["updated_at"] = int(item["updated_at"]["N"])
    data["resume_run_id"] = item.get("resume_run_id", {}).get("S")
    return record_from_dict(data)


class DynamoDBBackend:
    def __init__(self, table_name: str, client: Any = None, client_factory: Callable[[], Any] | None = None) -> None:
        self.table_name = table_name
        self._client = client
        self._client_factory = client_factory

    @property
    def client(self) -> Any:
        if self._client is None:
            if self._client_factory is not None:
                self._client = self._client_factory()
            else:
                import boto3

                self._client = boto3.client("dynamodb")
        return self._client

    def _key(self, key: str) -> dict[str, Any]:
        return {"pk": _s(key), "sk": _s(PENDING_SK)}

    def put(self, record: PendingRecord) -> None:
        self.client.put_item(TableName=self.table_name, Item=to_item(record))

    def get(self, key: str) -> PendingRecord | None:
        item = self.client.get_item(TableName=self.table_name, Key=self._key(key), ConsistentRead=True).get("Item")
        return from_item(item) if item else None

    def transition(self, key: str, expect: Expect, changes: Changes) -> PendingRecord:
        names = {"#status": "status", "#owner": "owner", "#ttl": "ttl", "#updated": "updated_at"}
        values: dict[str, Any] = {
            ":expect_status": _s(expect.status),
            ":owner": _s(expect.owner),
            ":now": _n(expect.now),
            ":status": _s(changes.status),
            ":updated": _n(changes.updated_at),
        }
        update = "SET #status = :status, #updated = :updated"
        if changes.resume_run_id is not None:
            names["#resume"] = "resume_run_id"
            values[":resume"] = _s(changes.resume_run_id)
            update += ", #resume = :resume"
        condition = TRANSITION_CONDITION
        if expect.ids_key is not None:
            names["#ids"] = "ids"
            values[":ids"] = _s(expect.ids_key)
            condition += SAME_TOOL_CALLS
        if expect.updated_at is not None:
            values[":expect_updated"] = _n(expect.updated_at)
            condition += UNCHANGED
        try:
            response = self.client.update_item(
                TableName=self.table_name,
                Key=self._key(key),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except self.client.exceptions.ConditionalCheckFailedException as error:
            item = error.response.get("Item")
            raise ConditionFailed(from_item(item) if item else None) from None
        return from_item(response["Attributes"])

    # ------------------------------------------------------------------------------------------- markers

    def _marker_item(self, key: str, body: dict[str, Any], expires_at: int) -> dict[str, Any]:
        return {"pk": _s(key), "sk": _s(MARKER_SK), "body": _s(json.dumps(body)), "ttl": _n(expires_at)}

    def create_marker(self, key: str, body: dict[str, Any], expires_at: int, now: int) -> dict[str, Any] | None:
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item=self._marker_item(key, body, expires_at),
                ConditionExpression=MARKER_ABSENT,
                ExpressionAttributeNames={"#ttl": "ttl"},
                ExpressionAttributeValues={":now": _n(now)},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except self.client.exceptions.ConditionalCheckFailedException as error:
            item = error.response.get("Item") or {}
            return json.loads(item["body"]["S"]) if "body" in item else {}
        return None

    def put_marker(self, key: str, body: dict[str, Any], expires_at: int) -> None:
        self.client.put_item(TableName=self.table_name, Item=self._marker_item(key, body, expires_at))

    def delete_marker(self, key: str) -> None:
        self.client.delete_item(TableName=self.table_name, Key={"pk": _s(key), "sk": _s(MARKER_SK)})

    # ------------------------------------------------------------------------------------------- plain items
    # Body as JSON in `body`; counters as numeric attributes `n_<name>` so that ADD updates them atomically.

    def get_item(self, pk: str, sk: str) -> dict[str, Any] | None:
        item = self.client.get_item(
            TableName=self.table_name, Key={"pk": _s(pk), "sk": _s(sk)}, ConsistentRead=True
        ).get("Item")
        return _plain(item) if item else None

    def put_item(self, pk: str, sk: str, body: dict[str, Any], *, only_if_absent: bool = False) -> bool:
        extra: dict[str, Any] = {"ConditionExpression": ITEM_ABSENT} if only_if_absent else {}
        try:
            self.client.put_item(
                TableName=self.table_name, Item={"pk": _s(pk), "sk": _s(sk), "body": _s(json.dumps(body))}, **extra
            )
        except self.client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def query_items(self, pk: str) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        params: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": _s(pk)},
            "ConsistentRead": True,
        }
        while True:
            page = self.client.query(**params)
            out.extend((item["sk"]["S"], _plain(item)) for item in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return out
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def increment(self, pk: str, sk: str, counters: dict[str, int], expires_at: int | None = None) -> dict[str, int]:
        names = {f"#c{i}": f"n_{name}" for i, name in enumerate(counters)}
        values = {f":c{i}": _n(value) for i, value in enumerate(counters.values())}
        update = "ADD " + ", ".join(f"#c{i} :c{i}" for i in range(len(counters)))
        if expires_at is not None:
            names["#ttl"] = "ttl"
            values[":ttl"] = _n(expires_at)
            update += " SET #ttl = :ttl"
        response = self.client.update_item(
            TableName=self.table_name,
            Key={"pk": _s(pk), "sk": _s(sk)},
            UpdateExpression=update,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
        )
        attributes = response["Attributes"]
        return {name: int(attributes[f"n_{name}"]["N"]) for name in counters}


def _plain(item: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(item["body"]["S"]) if "body" in item else {}
    for name, value in item.items():
        if name.startswith("n_"):
            body[name[2:]] = int(value["N"])
    return body

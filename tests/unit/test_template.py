"""Static checks of the SAM template (template.yaml) and its build inputs.

These guard the deployment's security and shape: least-privilege IAM, arm64 /
python3.12+, the dependency layer, the DynamoDB table, the REST API and the
outputs clients need. They read files only; no AWS access.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = ROOT / "template.yaml"
LAYER_REQUIREMENTS = ROOT / "layers" / "dependencies" / "requirements.txt"
EVENTS_DIR = ROOT / "events"

FUNCTION_ID = "GatewayFunction"
API_ID = "GatewayApi"
TABLE_ID = "GatewayStateTable"
LAYER_ID = "DependenciesLayer"
ROLE_ID = "GatewayFunctionRole"
SECRET_PARAM = "GatewaySecretArn"

DYNAMODB_ACTIONS = {
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:Query",
}
SECRET_ACTIONS = {"secretsmanager:GetSecretValue"}
LOG_ACTIONS = {"logs:CreateLogStream", "logs:PutLogEvents"}
# The only actions allowed on Resource "*": X-Ray trace submission has no
# resource-level permissions, so AWS requires "*" for it (optional tracing).
WILDCARD_RESOURCE_EXCEPTIONS = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
ALL_EXPECTED_ACTIONS = DYNAMODB_ACTIONS | SECRET_ACTIONS | LOG_ACTIONS | WILDCARD_RESOURCE_EXCEPTIONS

IAM_RESOURCE_TYPES = {"AWS::IAM::Role", "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"}


# --------------------------------------------------------------------------
# YAML loading with CloudFormation short-form intrinsics
# --------------------------------------------------------------------------
class CfnLoader(yaml.SafeLoader):
    """SafeLoader that turns !Ref, !Sub, !GetAtt, ... into their long JSON form."""


def _construct_intrinsic(loader: CfnLoader, tag_suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = tag_suffix
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if name == "Ref":
        return {"Ref": value}
    if name == "Condition":
        return {"Condition": value}
    if name == "GetAtt" and isinstance(value, str):
        resource, _, attribute = value.partition(".")
        value = [resource, attribute]
    return {f"Fn::{name}": value}


CfnLoader.add_multi_constructor("!", _construct_intrinsic)


def load_template() -> dict[str, Any]:
    with TEMPLATE_PATH.open(encoding="utf-8") as fh:
        return yaml.load(fh, Loader=CfnLoader)


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


@pytest.fixture(scope="module")
def resources(template: dict[str, Any]) -> dict[str, Any]:
    return template["Resources"]


@pytest.fixture(scope="module")
def function(resources: dict[str, Any]) -> dict[str, Any]:
    fn = resources[FUNCTION_ID]
    assert fn["Type"] == "AWS::Serverless::Function"
    return fn["Properties"]


def test_loader_understands_short_form_intrinsics() -> None:
    doc = yaml.load(
        "a: !Ref X\nb: !GetAtt T.Arn\nc: !Sub 'x-${Y}'\nd: !If [C, 1, !Ref AWS::NoValue]\n",
        Loader=CfnLoader,
    )
    assert doc == {
        "a": {"Ref": "X"},
        "b": {"Fn::GetAtt": ["T", "Arn"]},
        "c": {"Fn::Sub": "x-${Y}"},
        "d": {"Fn::If": ["C", 1, {"Ref": "AWS::NoValue"}]},
    }


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def expand_conditionals(value: Any) -> Iterator[Any]:
    """Yield every concrete alternative of a value, following both Fn::If branches."""
    if isinstance(value, dict) and set(value) == {"Fn::If"}:
        _condition, when_true, when_false = value["Fn::If"]
        yield from expand_conditionals(when_true)
        yield from expand_conditionals(when_false)
    elif value == {"Ref": "AWS::NoValue"}:
        return
    else:
        yield value


def iter_policy_documents(resources: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for logical_id, resource in resources.items():
        rtype = resource.get("Type")
        props = resource.get("Properties", {})
        if rtype == "AWS::IAM::Role":
            for policy in props.get("Policies", []):
                for concrete in expand_conditionals(policy):
                    yield logical_id, concrete["PolicyDocument"]
        elif rtype in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            yield logical_id, props["PolicyDocument"]
        elif rtype == "AWS::Serverless::Function":
            for policy in as_list(props.get("Policies", [])):
                for concrete in expand_conditionals(policy):
                    if isinstance(concrete, dict) and "Statement" in concrete:
                        yield logical_id, concrete


def iter_statements(resources: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for logical_id, document in iter_policy_documents(resources):
        for statement in as_list(document["Statement"]):
            for concrete in expand_conditionals(statement):
                yield logical_id, concrete


def statement_actions(statement: dict[str, Any]) -> set[str]:
    return set(as_list(statement["Action"]))


def statement_resources(statement: dict[str, Any]) -> list[Any]:
    return as_list(statement["Resource"])


def python_version_of(runtime: str) -> tuple[int, int]:
    match = re.fullmatch(r"python(\d+)\.(\d+)", runtime)
    assert match, f"not a Python runtime: {runtime!r}"
    return int(match.group(1)), int(match.group(2))


def resolve_number(template: dict[str, Any], value: Any) -> list[int]:
    """All values a Number property can take: literal, or a parameter's allowed/default values."""
    if isinstance(value, dict) and "Ref" in value:
        param = template["Parameters"][value["Ref"]]
        if "AllowedValues" in param:
            return [int(v) for v in param["AllowedValues"]]
        return [int(param[k]) for k in ("Default", "MinValue", "MaxValue") if k in param]
    return [int(value)]


# --------------------------------------------------------------------------
# basics
# --------------------------------------------------------------------------
def test_is_a_sam_template(template: dict[str, Any]) -> None:
    assert template["Transform"] == "AWS::Serverless-2016-10-31"


def test_expected_logical_ids(resources: dict[str, Any]) -> None:
    assert resources[FUNCTION_ID]["Type"] == "AWS::Serverless::Function"
    assert resources[API_ID]["Type"] == "AWS::Serverless::Api"
    assert resources[TABLE_ID]["Type"] == "AWS::DynamoDB::Table"
    assert resources[LAYER_ID]["Type"] == "AWS::Serverless::LayerVersion"
    assert resources[ROLE_ID]["Type"] == "AWS::IAM::Role"


# --------------------------------------------------------------------------
# function
# --------------------------------------------------------------------------
def test_function_is_arm64_python312_or_newer(function: dict[str, Any]) -> None:
    assert function["Architectures"] == ["arm64"]
    assert python_version_of(function["Runtime"]) >= (3, 12)


def test_handler_module_exists(function: dict[str, Any]) -> None:
    assert function["Handler"] == "letta_gateway.handler.handler"
    assert function["CodeUri"].rstrip("/") == "functions"
    module_path, _, attribute = function["Handler"].rpartition(".")
    assert attribute
    module_file = ROOT / function["CodeUri"] / (module_path.replace(".", "/") + ".py")
    assert module_file == ROOT / "functions" / "letta_gateway" / "handler.py"
    assert module_file.is_file(), f"handler module missing: {module_file.relative_to(ROOT)}"


def test_function_sizing(template: dict[str, Any], function: dict[str, Any]) -> None:
    for memory in resolve_number(template, function["MemorySize"]):
        assert 512 <= memory <= 1024
    # buffered REST API integrations time out at 29 s
    assert 29 <= int(function["Timeout"]) <= 30


def test_function_uses_the_layer_and_no_vendored_dependencies(function: dict[str, Any]) -> None:
    assert {"Ref": LAYER_ID} in function["Layers"]
    assert not (ROOT / "functions" / "requirements.txt").exists(), "all dependencies come from the layer"


def test_function_environment(template: dict[str, Any], function: dict[str, Any]) -> None:
    env = function["Environment"]["Variables"]
    assert env["GATEWAY_STATE_TABLE"] == {"Ref": TABLE_ID}
    assert env["GATEWAY_SECRET_ID"] == {"Ref": SECRET_PARAM}
    assert env["LETTA_BASE_URL"] == {"Ref": "LettaBaseUrl"}
    assert env["GATEWAY_PENDING_TTL_SECONDS"] == {"Ref": "PendingTtlSeconds"}
    assert env["GATEWAY_LOG_LEVEL"] == {"Ref": "LogLevel"}
    assert env["GATEWAY_MAX_BODY_BYTES"] == {"Ref": "MaxBodyBytes"}
    assert env["POWERTOOLS_SERVICE_NAME"] == "letta-gateway"
    assert env["POWERTOOLS_LOG_LEVEL"] == {"Ref": "LogLevel"}
    params = template["Parameters"]
    assert params["LettaBaseUrl"]["Default"] == "https://api.letta.com"
    assert int(params["PendingTtlSeconds"]["Default"]) == 86400


def test_json_logging_to_explicit_log_group_with_retention(resources: dict[str, Any], function: dict[str, Any]) -> None:
    logging_config = function["LoggingConfig"]
    assert logging_config["LogFormat"] == "JSON"
    log_group_ref = logging_config["LogGroup"]
    assert set(log_group_ref) == {"Ref"}
    log_group = resources[log_group_ref["Ref"]]
    assert log_group["Type"] == "AWS::Logs::LogGroup"
    assert log_group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}


# --------------------------------------------------------------------------
# layer
# --------------------------------------------------------------------------
def test_layer_builds_for_arm64_with_the_function_runtime(resources: dict[str, Any], function: dict[str, Any]) -> None:
    layer = resources[LAYER_ID]
    props = layer["Properties"]
    assert props["ContentUri"].rstrip("/") == "layers/dependencies"
    assert props["CompatibleArchitectures"] == ["arm64"]
    assert function["Runtime"] in props["CompatibleRuntimes"]
    assert layer["Metadata"]["BuildMethod"] == function["Runtime"]
    assert layer["Metadata"]["BuildArchitecture"] == "arm64"


def _requirement_names() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in LAYER_REQUIREMENTS.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([A-Za-z0-9.+!-]+)", line)
        assert match, f"requirement is not pinned exactly: {line!r}"
        name = re.sub(r"[-_.]+", "-", match.group(1)).lower()
        pins[name] = match.group(3)
    return pins


def test_layer_requirements_are_pinned_and_complete() -> None:
    pins = _requirement_names()
    for needed in ("mangum", "fastapi", "letta-client", "aws-lambda-powertools", "pydantic"):
        assert needed in pins, f"{needed} missing from the layer requirements"
    assert pins["letta-client"] == "1.12.1"


def test_layer_requirements_exclude_the_aws_sdk() -> None:
    pins = _requirement_names()
    for banned in ("boto3", "botocore", "s3transfer", "aioboto3", "aiobotocore"):
        assert banned not in pins, f"{banned} must not be in the layer: the Lambda runtime ships it"
    text = LAYER_REQUIREMENTS.read_text(encoding="utf-8").lower()
    assert "[all]" not in text and "[aws-sdk]" not in text, "extras that pull boto3 are not allowed"


# --------------------------------------------------------------------------
# IAM: least privilege
# --------------------------------------------------------------------------
def test_function_uses_only_the_explicit_role(resources: dict[str, Any], function: dict[str, Any]) -> None:
    assert function["Role"] == {"Fn::GetAtt": [ROLE_ID, "Arn"]}
    # With an explicit Role SAM ignores Policies; none may hide there either.
    assert "Policies" not in function
    role = resources[ROLE_ID]["Properties"]
    # AWS managed policies (e.g. AWSLambdaBasicExecutionRole) grant Resource "*".
    assert not role.get("ManagedPolicyArns")
    assert "PermissionsBoundary" not in role or role["PermissionsBoundary"]
    trust = as_list(role["AssumeRolePolicyDocument"]["Statement"])
    assert [s["Principal"] for s in trust] == [{"Service": "lambda.amazonaws.com"}]
    assert all(s["Action"] == "sts:AssumeRole" for s in trust)


def test_there_are_policy_statements(resources: dict[str, Any]) -> None:
    assert len(list(iter_statements(resources))) >= 3


def test_no_wildcard_actions_and_only_allow_statements(resources: dict[str, Any]) -> None:
    for logical_id, statement in iter_statements(resources):
        assert statement["Effect"] == "Allow", logical_id
        assert "NotAction" not in statement and "NotResource" not in statement, logical_id
        for action in statement_actions(statement):
            assert isinstance(action, str), f"{logical_id}: non-literal action {action!r}"
            assert "*" not in action, f"{logical_id}: wildcard action {action!r}"


def test_granted_actions_are_exactly_the_expected_set(resources: dict[str, Any]) -> None:
    granted: set[str] = set()
    for _logical_id, statement in iter_statements(resources):
        granted |= statement_actions(statement)
    assert granted == ALL_EXPECTED_ACTIONS


def test_resource_star_only_for_documented_exceptions(resources: dict[str, Any]) -> None:
    for logical_id, statement in iter_statements(resources):
        targets = statement_resources(statement)
        if any(isinstance(t, str) and "*" in t for t in targets):
            assert targets == ["*"], f"{logical_id}: partial wildcard resource {targets!r}"
            extra = statement_actions(statement) - WILDCARD_RESOURCE_EXCEPTIONS
            assert not extra, f"{logical_id}: Resource '*' granted for {sorted(extra)}"


def test_dynamodb_access_is_the_five_item_actions_on_the_table_only(resources: dict[str, Any]) -> None:
    dynamodb_actions: set[str] = set()
    for logical_id, statement in iter_statements(resources):
        actions = {a for a in statement_actions(statement) if a.lower().startswith("dynamodb:")}
        if not actions:
            continue
        assert actions == statement_actions(statement), f"{logical_id}: mixed-service statement"
        assert statement_resources(statement) == [{"Fn::GetAtt": [TABLE_ID, "Arn"]}], logical_id
        dynamodb_actions |= actions
    assert dynamodb_actions == DYNAMODB_ACTIONS


def test_secret_access_is_get_secret_value_on_the_parameter_only(resources: dict[str, Any]) -> None:
    seen = False
    for logical_id, statement in iter_statements(resources):
        actions = {a for a in statement_actions(statement) if a.lower().startswith("secretsmanager:")}
        if not actions:
            continue
        seen = True
        assert statement_actions(statement) == SECRET_ACTIONS, logical_id
        assert statement_resources(statement) == [{"Ref": SECRET_PARAM}], logical_id
    assert seen


def test_logs_access_is_scoped_to_the_function_log_group(resources: dict[str, Any], function: dict[str, Any]) -> None:
    log_group_id = function["LoggingConfig"]["LogGroup"]["Ref"]
    for logical_id, statement in iter_statements(resources):
        if any(a.startswith("logs:") for a in statement_actions(statement)):
            assert statement_actions(statement) <= LOG_ACTIONS, logical_id
            assert statement_resources(statement) == [{"Fn::GetAtt": [log_group_id, "Arn"]}], logical_id


def test_secret_parameter_requires_a_full_secret_arn(template: dict[str, Any]) -> None:
    param = template["Parameters"][SECRET_PARAM]
    assert param["Type"] == "String"
    assert "Default" not in param, "the secret must be chosen explicitly"
    pattern = re.compile(param["AllowedPattern"])
    good = "arn:aws:secretsmanager:us-east-1:123456789012:secret:letta-gateway-AbCdEf"
    assert pattern.fullmatch(good)
    assert pattern.fullmatch("arn:aws-us-gov:secretsmanager:us-gov-west-1:123456789012:secret:prod/letta-Ab12Cd")
    for bad in (
        "*",
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:*",
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:letta-gateway",  # partial ARN
        "arn:aws:secretsmanager:*:*:secret:letta-gateway-AbCdEf",
        "letta-gateway",
    ):
        assert not pattern.fullmatch(bad), bad


# --------------------------------------------------------------------------
# DynamoDB table
# --------------------------------------------------------------------------
def test_state_table(resources: dict[str, Any]) -> None:
    props = resources[TABLE_ID]["Properties"]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert "ProvisionedThroughput" not in props
    assert props["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    attribute_types = {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]}
    assert attribute_types == {"pk": "S", "sk": "S"}
    assert props["TimeToLiveSpecification"] == {"AttributeName": "ttl", "Enabled": True}
    assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    assert props["SSESpecification"]["SSEEnabled"] is True
    # no secondary indexes: the role's Query grant covers the base table only
    assert "GlobalSecondaryIndexes" not in props and "LocalSecondaryIndexes" not in props


# --------------------------------------------------------------------------
# REST API
# --------------------------------------------------------------------------
def test_api_is_regional_rest_api_without_cors(resources: dict[str, Any]) -> None:
    props = resources[API_ID]["Properties"]
    endpoint = props["EndpointConfiguration"]
    endpoint_type = endpoint["Type"] if isinstance(endpoint, dict) else endpoint
    assert endpoint_type == "REGIONAL"
    assert "Cors" not in props
    assert props["StageName"] == {"Ref": "StageName"}
    text = json.dumps(props).lower()
    assert "access-control-allow" not in text
    # no HTTP API (ApiGatewayV2) in the stack: the gateway is a REST API
    assert not any(r["Type"].startswith("AWS::ApiGatewayV2::") for r in resources.values())
    assert not any(r["Type"] == "AWS::Serverless::HttpApi" for r in resources.values())


def test_api_has_default_throttling(resources: dict[str, Any]) -> None:
    settings = resources[API_ID]["Properties"]["MethodSettings"]
    catch_all = [s for s in settings if s.get("ResourcePath") == "/*" and s.get("HttpMethod") == "*"]
    assert catch_all, "throttling must apply to every method"
    assert "ThrottlingRateLimit" in catch_all[0] and "ThrottlingBurstLimit" in catch_all[0]


def _route_matches(pattern: str, path: str) -> bool:
    regex = "^"
    for part in re.split(r"(\{[^}]+\})", pattern):
        if not part:
            continue
        if part.endswith("+}"):
            regex += ".+"
        elif part.startswith("{"):
            regex += "[^/]+"
        else:
            regex += re.escape(part)
    return re.fullmatch(regex + "$", path) is not None


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/health"),
        ("GET", "/v1/models"),
        ("GET", "/v1/models/demo-agent"),
        ("POST", "/v1/chat/completions"),
    ],
)
def test_every_route_reaches_the_function(function: dict[str, Any], method: str, path: str) -> None:
    routes = []
    for event in function["Events"].values():
        assert event["Type"] == "Api", "routes must come from the REST API"
        props = event["Properties"]
        assert props["RestApiId"] == {"Ref": API_ID}
        routes.append((props["Method"].upper(), props["Path"]))
    assert any(m in ("ANY", method) and _route_matches(p, path) for m, p in routes), (
        f"{method} {path} does not reach {FUNCTION_ID}: {routes}"
    )


def test_route_matcher_is_not_vacuous() -> None:
    assert _route_matches("/{proxy+}", "/v1/models/demo-agent")
    assert _route_matches("/v1/models/{model}", "/v1/models/demo-agent")
    assert not _route_matches("/v1/models/{model}", "/v1/models")
    assert not _route_matches("/health", "/v1/models")


# --------------------------------------------------------------------------
# outputs
# --------------------------------------------------------------------------
def test_outputs(template: dict[str, Any]) -> None:
    outputs = template["Outputs"]
    base_url = outputs["GatewayBaseUrl"]["Value"]["Fn::Sub"]
    assert base_url.startswith(f"https://${{{API_ID}}}.execute-api.${{AWS::Region}}.${{AWS::URLSuffix}}/")
    assert base_url.endswith("/v1")
    assert base_url == (f"https://${{{API_ID}}}.execute-api.${{AWS::Region}}.${{AWS::URLSuffix}}/${{StageName}}/v1")
    assert outputs["GatewayStateTableName"]["Value"] == {"Ref": TABLE_ID}
    assert outputs["GatewayFunctionName"]["Value"] == {"Ref": FUNCTION_ID}


# --------------------------------------------------------------------------
# sample events
# --------------------------------------------------------------------------
EVENT_ROUTES = {
    "health.json": ("GET", "/health"),
    "models.json": ("GET", "/v1/models"),
    "model.json": ("GET", "/v1/models/demo-agent"),
    "chat.json": ("POST", "/v1/chat/completions"),
    "chat-stream.json": ("POST", "/v1/chat/completions"),
    "tool-result.json": ("POST", "/v1/chat/completions"),
}


@pytest.mark.parametrize(("name", "route"), sorted(EVENT_ROUTES.items()))
def test_sample_events_are_rest_api_proxy_events(name: str, route: tuple[str, str]) -> None:
    event = json.loads((EVENTS_DIR / name).read_text(encoding="utf-8"))
    method, path = route
    assert "version" not in event, "REST API (v1) events carry no version"
    assert event["httpMethod"] == method and event["path"] == path
    context = event["requestContext"]
    for key in ("requestId", "stage", "identity", "httpMethod", "resourcePath", "path"):
        assert key in context
    assert context["httpMethod"] == method
    assert event["isBase64Encoded"] is False
    for headers in (event["headers"], {k: v[0] for k, v in event["multiValueHeaders"].items()}):
        assert headers["Authorization"] == "Bearer sk-demo-local-key"
        assert headers["Content-Type"] == "application/json"
    if method == "POST":
        body = json.loads(event["body"])
        assert body["model"] == "demo-agent"
        assert [t["function"]["name"] for t in body["tools"]] == ["read_file"]
        assert body.get("stream", False) is (name == "chat-stream.json")
        if name == "chat-stream.json":
            assert body["stream_options"] == {"include_usage": True}
        if name == "tool-result.json":
            roles = [m["role"] for m in body["messages"]]
            assert roles == ["user", "assistant", "tool"]
            call = body["messages"][1]["tool_calls"][0]
            assert call["id"] == "call_demo_1" and call["function"]["name"] == "read_file"
            assert json.loads(call["function"]["arguments"]) == {"path": "README.md"}
            assert body["messages"][2]["tool_call_id"] == "call_demo_1"
            assert body["messages"][2]["content"] == "file body"

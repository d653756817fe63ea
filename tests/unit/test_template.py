"""Static checks of the SAM template (template.yaml) and its build inputs.

These guard the deployment's security and shape: least-privilege IAM for both
functions, arm64 / python3.12+, one code tree and one dependency layer, the
buffered Mangum function and the streaming Lambda Web Adapter function with
their routes, timeouts, SnapStart, log retention and alarms, the DynamoDB
table, the REST API, the outputs clients need, the sample events and the
Docker-free event invoker. They read files (and run scripts/invoke-event
locally); no AWS access.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = ROOT / "template.yaml"
LAYER_REQUIREMENTS = ROOT / "layers" / "dependencies" / "requirements.txt"
EVENTS_DIR = ROOT / "events"
RUN_SH = ROOT / "functions" / "run.sh"
INVOKE_EVENT = ROOT / "scripts" / "invoke-event"

FUNCTION_ID = "GatewayFunction"
CHAT_FUNCTION_ID = "ChatStreamFunction"
FUNCTION_IDS = (FUNCTION_ID, CHAT_FUNCTION_ID)
API_ID = "GatewayApi"
TABLE_ID = "GatewayStateTable"
LAYER_ID = "DependenciesLayer"
ROLE_ID = "GatewayFunctionRole"
CHAT_ROLE_ID = "ChatStreamFunctionRole"
ROLE_OF = {FUNCTION_ID: ROLE_ID, CHAT_FUNCTION_ID: CHAT_ROLE_ID}
SECRET_PARAM = "GatewaySecretArn"
TIMEOUT_PARAM = "ChatTimeoutSeconds"
LWA_PARAM = "LwaLayerVersion"
CHAT_PATH = "/v1/chat/completions"
LWA_LAYER_SUB = "arn:aws:lambda:${AWS::Region}:753240598075:layer:LambdaAdapterLayerArm64:${" + LWA_PARAM + "}"
LAMBDA_MAX_TIMEOUT = 900  # seconds: Lambda's maximum, and the longest a streamed REST API response may last
BUFFERED_LIMIT = 29  # seconds: API Gateway's buffered integration timeout

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


@pytest.fixture(scope="module")
def chat_function(resources: dict[str, Any]) -> dict[str, Any]:
    fn = resources[CHAT_FUNCTION_ID]
    assert fn["Type"] == "AWS::Serverless::Function"
    return fn["Properties"]


@pytest.fixture(scope="module", params=FUNCTION_IDS)
def any_function(request: pytest.FixtureRequest, resources: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return request.param, resources[request.param]["Properties"]


def test_loader_understands_short_form_intrinsics() -> None:
    doc = yaml.load(
        "a: !Ref X\nb: !GetAtt T.Arn\nc: !Sub 'x-${Y}'\nd: !If [C, 1, !Ref AWS::NoValue]\n"
        "e: !FindInMap [M, !Ref K, V]\n",
        Loader=CfnLoader,
    )
    assert doc == {
        "a": {"Ref": "X"},
        "b": {"Fn::GetAtt": ["T", "Arn"]},
        "c": {"Fn::Sub": "x-${Y}"},
        "d": {"Fn::If": ["C", 1, {"Ref": "AWS::NoValue"}]},
        "e": {"Fn::FindInMap": ["M", {"Ref": "K"}, "V"]},
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


def role_statements(resources: dict[str, Any], role_id: str) -> list[dict[str, Any]]:
    return [statement for logical_id, statement in iter_statements(resources) if logical_id == role_id]


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


def api_events(function_props: dict[str, Any]) -> dict[str, dict[str, Any]]:
    events = function_props.get("Events", {})
    for name, event in events.items():
        assert event["Type"] == "Api", f"{name}: routes must come from the REST API"
        assert event["Properties"]["RestApiId"] == {"Ref": API_ID}, name
    return {name: event["Properties"] for name, event in events.items()}


# --------------------------------------------------------------------------
# basics
# --------------------------------------------------------------------------
def test_is_a_sam_template(template: dict[str, Any]) -> None:
    assert template["Transform"] == "AWS::Serverless-2016-10-31"


def test_expected_logical_ids(resources: dict[str, Any]) -> None:
    assert resources[FUNCTION_ID]["Type"] == "AWS::Serverless::Function"
    assert resources[CHAT_FUNCTION_ID]["Type"] == "AWS::Serverless::Function"
    assert resources[API_ID]["Type"] == "AWS::Serverless::Api"
    assert resources[TABLE_ID]["Type"] == "AWS::DynamoDB::Table"
    assert resources[LAYER_ID]["Type"] == "AWS::Serverless::LayerVersion"
    assert resources[ROLE_ID]["Type"] == "AWS::IAM::Role"
    assert resources[CHAT_ROLE_ID]["Type"] == "AWS::IAM::Role"
    functions = [k for k, r in resources.items() if r["Type"] in ("AWS::Serverless::Function", "AWS::Lambda::Function")]
    assert sorted(functions) == sorted(FUNCTION_IDS)


def test_every_parameter_is_in_a_parameter_group(template: dict[str, Any]) -> None:
    groups = template["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
    grouped = [name for group in groups for name in group["Parameters"]]
    assert sorted(grouped) == sorted(template["Parameters"]), "every parameter appears exactly once in a group"
    for name, param in template["Parameters"].items():
        assert param.get("Description"), f"{name} has no description"


# --------------------------------------------------------------------------
# functions: one code tree, one dependency layer, two entries
# --------------------------------------------------------------------------
def test_functions_are_arm64_python312_or_newer(any_function: tuple[str, dict[str, Any]]) -> None:
    _name, props = any_function
    assert props["Architectures"] == ["arm64"]
    assert python_version_of(props["Runtime"]) >= (3, 12)


def test_both_functions_run_the_same_code_tree_and_dependency_layer(
    function: dict[str, Any], chat_function: dict[str, Any]
) -> None:
    for key in ("CodeUri", "Runtime", "Architectures", "MemorySize"):
        assert function[key] == chat_function[key], key
    assert function["CodeUri"].rstrip("/") == "functions"
    assert function["Layers"][0] == {"Ref": LAYER_ID}
    assert chat_function["Layers"][0] == {"Ref": LAYER_ID}
    assert not (ROOT / "functions" / "requirements.txt").exists(), "all dependencies come from the layer"


def test_handler_module_exists(function: dict[str, Any]) -> None:
    assert function["Handler"] == "letta_gateway.handler.handler"
    assert function["CodeUri"].rstrip("/") == "functions"
    module_path, _, attribute = function["Handler"].rpartition(".")
    assert attribute
    module_file = ROOT / function["CodeUri"] / (module_path.replace(".", "/") + ".py")
    assert module_file == ROOT / "functions" / "letta_gateway" / "handler.py"
    assert module_file.is_file(), f"handler module missing: {module_file.relative_to(ROOT)}"


def test_buffered_function_sizing(template: dict[str, Any], function: dict[str, Any]) -> None:
    for memory in resolve_number(template, function["MemorySize"]):
        assert 512 <= memory <= 1024
    # buffered REST API integrations time out at 29 s: running longer is wasted
    assert BUFFERED_LIMIT <= int(function["Timeout"]) <= 30
    assert "GATEWAY_DEADLINE_SECONDS" not in function["Environment"]["Variables"]
    assert float(function["Environment"]["Variables"]["LETTA_TIMEOUT_SECONDS"]) < BUFFERED_LIMIT


def test_function_environment(template: dict[str, Any], any_function: tuple[str, dict[str, Any]]) -> None:
    _name, props = any_function
    env = props["Environment"]["Variables"]
    assert env["GATEWAY_STATE_TABLE"] == {"Ref": TABLE_ID}
    assert env["GATEWAY_SECRET_ID"] == {"Ref": SECRET_PARAM}
    assert env["LETTA_BASE_URL"] == {"Ref": "LettaBaseUrl"}
    assert env["GATEWAY_PENDING_TTL_SECONDS"] == {"Ref": "PendingTtlSeconds"}
    assert env["GATEWAY_LOG_LEVEL"] == {"Ref": "LogLevel"}
    assert env["GATEWAY_MAX_BODY_BYTES"] == {"Ref": "MaxBodyBytes"}
    assert env["POWERTOOLS_SERVICE_NAME"] == "letta-gateway"
    assert env["POWERTOOLS_LOG_LEVEL"] == {"Ref": "LogLevel"}
    assert "LETTA_TIMEOUT_SECONDS" in env
    params = template["Parameters"]
    assert params["LettaBaseUrl"]["Default"] == "https://api.letta.com"
    assert int(params["PendingTtlSeconds"]["Default"]) == 86400


def test_chat_function_environment_is_the_gateway_environment_plus_its_own(
    function: dict[str, Any], chat_function: dict[str, Any]
) -> None:
    buffered = function["Environment"]["Variables"]
    streaming = chat_function["Environment"]["Variables"]
    own = {"GATEWAY_ENTRY", "LETTA_TIMEOUT_SECONDS"}
    for name, value in buffered.items():
        if name not in own:
            assert streaming.get(name) == value, f"{name} differs between the two functions"
    assert buffered["GATEWAY_ENTRY"] == "mangum"
    assert streaming["GATEWAY_ENTRY"] == "lwa"
    assert set(streaming) - set(buffered) == {
        "GATEWAY_DEADLINE_SECONDS",
        "AWS_LAMBDA_EXEC_WRAPPER",
        "AWS_LWA_INVOKE_MODE",
        "AWS_LWA_READINESS_CHECK_PATH",
        "PORT",
    }


def test_json_logging_to_own_log_group_with_retention(
    resources: dict[str, Any], any_function: tuple[str, dict[str, Any]]
) -> None:
    name, props = any_function
    logging_config = props["LoggingConfig"]
    assert logging_config["LogFormat"] == "JSON"
    log_group_ref = logging_config["LogGroup"]
    assert set(log_group_ref) == {"Ref"}
    log_group = resources[log_group_ref["Ref"]]
    assert log_group["Type"] == "AWS::Logs::LogGroup"
    assert log_group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    assert log_group_ref["Ref"] == f"{name}LogGroup"


def test_each_function_has_a_distinct_log_group(function: dict[str, Any], chat_function: dict[str, Any]) -> None:
    groups = {function["LoggingConfig"]["LogGroup"]["Ref"], chat_function["LoggingConfig"]["LogGroup"]["Ref"]}
    assert len(groups) == 2


def test_every_log_group_has_retention(template: dict[str, Any], resources: dict[str, Any]) -> None:
    log_groups = {k: r for k, r in resources.items() if r["Type"] == "AWS::Logs::LogGroup"}
    assert len(log_groups) >= 3
    allowed = {int(v) for v in template["Parameters"]["LogRetentionDays"]["AllowedValues"]}
    assert int(template["Parameters"]["LogRetentionDays"]["Default"]) in allowed
    for logical_id, log_group in log_groups.items():
        assert log_group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}, logical_id


# --------------------------------------------------------------------------
# the streaming function: Lambda Web Adapter, run.sh, long timeout
# --------------------------------------------------------------------------
def test_chat_function_runs_run_sh_under_the_lambda_web_adapter(
    template: dict[str, Any], chat_function: dict[str, Any]
) -> None:
    assert chat_function["Handler"] == "run.sh"
    env = chat_function["Environment"]["Variables"]
    assert env["AWS_LAMBDA_EXEC_WRAPPER"] == "/opt/bootstrap"
    assert env["AWS_LWA_INVOKE_MODE"] == "response_stream"
    assert env["AWS_LWA_READINESS_CHECK_PATH"] == "/health"
    assert env["PORT"] == "8080"
    assert chat_function["Layers"][1:] == [{"Fn::Sub": LWA_LAYER_SUB}]
    param = template["Parameters"][LWA_PARAM]
    assert param["Type"] == "Number"
    assert int(param["Default"]) == 30  # Lambda Web Adapter 1.1.0


def test_run_sh_starts_uvicorn_on_loopback_with_the_layer_on_the_path() -> None:
    assert RUN_SH.is_file()
    mode = RUN_SH.stat().st_mode
    assert mode & stat.S_IXUSR and mode & stat.S_IXOTH, "run.sh must be executable: Lambda execs it"
    text = RUN_SH.read_text(encoding="utf-8")
    assert text.startswith("#!/bin/bash\n")
    assert re.search(r"^exec python -m uvicorn letta_gateway\.asgi:app\b", text, re.M)
    assert "--host 127.0.0.1" in text
    assert '--port "${PORT:-8080}"' in text
    pythonpath = re.search(r'^export PYTHONPATH="(.*)"$', text, re.M)
    assert pythonpath, "run.sh must set PYTHONPATH explicitly"
    for needed in ("${task_root}", "/opt/python", "LAMBDA_RUNTIME_DIR"):
        assert needed in pythonpath.group(1)
    assert (ROOT / "functions" / "letta_gateway" / "asgi.py").is_file()
    subprocess.run(["bash", "-n", str(RUN_SH)], check=True)


def test_readiness_check_path_is_a_route_the_app_serves_without_auth() -> None:
    event = json.loads((EVENTS_DIR / "health.json").read_text(encoding="utf-8"))
    assert event["path"] == "/health"


def test_chat_timeout_is_a_parameter_of_at_most_fifteen_minutes(
    template: dict[str, Any], chat_function: dict[str, Any]
) -> None:
    assert chat_function["Timeout"] == {"Ref": TIMEOUT_PARAM}
    param = template["Parameters"][TIMEOUT_PARAM]
    assert param["Type"] == "Number"
    assert int(param["Default"]) == LAMBDA_MAX_TIMEOUT
    allowed = [int(v) for v in param["AllowedValues"]]
    assert max(allowed) == LAMBDA_MAX_TIMEOUT
    assert min(allowed) > BUFFERED_LIMIT, "the streaming function exists to outlive the buffered path"


def test_chat_deadline_and_letta_timeout_follow_the_function_timeout(
    template: dict[str, Any], chat_function: dict[str, Any]
) -> None:
    env = chat_function["Environment"]["Variables"]
    assert env["GATEWAY_DEADLINE_SECONDS"] == {
        "Fn::FindInMap": ["ChatTimeouts", {"Ref": TIMEOUT_PARAM}, "DeadlineSeconds"]
    }
    assert env["LETTA_TIMEOUT_SECONDS"] == {
        "Fn::FindInMap": ["ChatTimeouts", {"Ref": TIMEOUT_PARAM}, "LettaTimeoutSeconds"]
    }
    mapping = template["Mappings"]["ChatTimeouts"]
    allowed = {int(v) for v in template["Parameters"][TIMEOUT_PARAM]["AllowedValues"]}
    assert {int(k) for k in mapping} == allowed, "every allowed timeout needs its mapping entry"
    for key, row in mapping.items():
        timeout = int(key)
        assert int(row["DeadlineSeconds"]) == timeout - 10
        assert int(row["LettaTimeoutSeconds"]) == timeout - 15
        assert int(row["LettaTimeoutSeconds"]) < int(row["DeadlineSeconds"]) < timeout


# --------------------------------------------------------------------------
# SnapStart on published versions
# --------------------------------------------------------------------------
def test_snapstart_on_published_versions_of_both_functions(
    template: dict[str, Any], any_function: tuple[str, dict[str, Any]]
) -> None:
    name, props = any_function
    # SnapStart supports Python 3.12 and later managed runtimes
    assert python_version_of(props["Runtime"]) >= (3, 12)
    assert props["AutoPublishAlias"] == "live", f"{name}: the API must invoke a published version"
    assert props["AutoPublishAliasAllProperties"] is True, f"{name}: layer/timeout changes must publish"
    assert props["SnapStart"] == {"ApplyOn": {"Fn::If": ["SnapStartEnabled", "PublishedVersions", "None"]}}
    assert template["Conditions"]["SnapStartEnabled"] == {"Fn::Equals": [{"Ref": "EnableSnapStart"}, "true"]}
    assert template["Parameters"]["EnableSnapStart"]["Default"] == "true"
    # SnapStart is incompatible with provisioned concurrency, EFS and large /tmp
    for incompatible in ("ProvisionedConcurrencyConfig", "FileSystemConfigs", "EphemeralStorage"):
        assert incompatible not in props, f"{name}: {incompatible} cannot be combined with SnapStart"


# --------------------------------------------------------------------------
# layer
# --------------------------------------------------------------------------
def test_layer_builds_for_arm64_with_the_function_runtime(resources: dict[str, Any], function: dict[str, Any]) -> None:
    layer = resources[LAYER_ID]
    props = layer["Properties"]
    assert props["ContentUri"].rstrip("/") == "layers/dependencies"
    assert props["CompatibleArchitectures"] == ["arm64"]
    assert function["Runtime"] in props["CompatibleRuntimes"]
    assert layer["Metadata"]["BuildMethod"] == "makefile"
    assert layer["Metadata"]["BuildArchitecture"] == "arm64"
    # layers/dependencies/Makefile resolves wheels for the functions' platform and ships them as bytecode
    makefile = (ROOT / "layers" / "dependencies" / "Makefile").read_text(encoding="utf-8")
    version = function["Runtime"].removeprefix("python")
    assert f"PYTHON ?= python{version}" in makefile and f"--python-version {version}" in makefile
    assert "PLATFORM ?= manylinux2014_aarch64" in makefile and "--only-binary=:all:" in makefile
    assert "build-DependenciesLayer:" in makefile and "-r requirements.txt" in makefile


def test_functions_ship_their_bytecode(resources: dict[str, Any]) -> None:
    """Both functions build through functions/Makefile, which compiles the package for the runtime's Python
    (the built artifact itself is checked by .ci/template-check after `sam build`)."""
    makefile = (ROOT / "functions" / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"(build-\w+)", makefile.split("\n\n", 1)[1].split(":", 1)[0]))
    assert targets == {f"build-{name}" for name in FUNCTION_IDS}
    assert "--invalidation-mode unchecked-hash" in makefile
    for name in FUNCTION_IDS:
        resource = resources[name]
        assert resource["Metadata"]["BuildMethod"] == "makefile"
        assert resource["Properties"]["CodeUri"].rstrip("/") == "functions"
        assert f"PYTHON ?= python{resource['Properties']['Runtime'].removeprefix('python')}" in makefile


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
    for needed in ("mangum", "fastapi", "uvicorn", "letta-client", "aws-lambda-powertools", "pydantic"):
        assert needed in pins, f"{needed} missing from the layer requirements"
    assert pins["letta-client"] == "1.12.1"


def test_layer_requirements_exclude_the_aws_sdk() -> None:
    pins = _requirement_names()
    for banned in ("boto3", "botocore", "s3transfer", "aioboto3", "aiobotocore"):
        assert banned not in pins, f"{banned} must not be in the layer: the Lambda runtime ships it"
    text = LAYER_REQUIREMENTS.read_text(encoding="utf-8").lower()
    assert "[all]" not in text and "[aws-sdk]" not in text, "extras that pull boto3 are not allowed"
    assert "uvicorn[" not in text, "plain uvicorn: the [standard] extras add native code"


# --------------------------------------------------------------------------
# IAM: least privilege, one role per function
# --------------------------------------------------------------------------
def test_functions_use_only_their_own_explicit_role(
    resources: dict[str, Any], any_function: tuple[str, dict[str, Any]]
) -> None:
    name, props = any_function
    assert props["Role"] == {"Fn::GetAtt": [ROLE_OF[name], "Arn"]}
    # With an explicit Role SAM ignores Policies; none may hide there either.
    assert "Policies" not in props
    role = resources[ROLE_OF[name]]["Properties"]
    # AWS managed policies (e.g. AWSLambdaBasicExecutionRole) grant Resource "*".
    assert not role.get("ManagedPolicyArns")
    assert "PermissionsBoundary" not in role or role["PermissionsBoundary"]
    trust = as_list(role["AssumeRolePolicyDocument"]["Statement"])
    assert [s["Principal"] for s in trust] == [{"Service": "lambda.amazonaws.com"}]
    assert all(s["Action"] == "sts:AssumeRole" for s in trust)


def test_roles_are_used_by_one_function_each(resources: dict[str, Any]) -> None:
    roles = [k for k, r in resources.items() if r["Type"] == "AWS::IAM::Role"]
    assert sorted(roles) == sorted(ROLE_OF.values())
    used = [r["Properties"]["Role"]["Fn::GetAtt"][0] for r in resources.values() if r["Type"].endswith("::Function")]
    assert sorted(used) == sorted(ROLE_OF.values())


def test_no_standalone_policies(resources: dict[str, Any]) -> None:
    assert not [k for k, r in resources.items() if r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")]


def test_there_are_policy_statements(resources: dict[str, Any]) -> None:
    for role_id in ROLE_OF.values():
        assert len(role_statements(resources, role_id)) >= 3


def test_no_wildcard_actions_and_only_allow_statements(resources: dict[str, Any]) -> None:
    for logical_id, statement in iter_statements(resources):
        assert statement["Effect"] == "Allow", logical_id
        assert "NotAction" not in statement and "NotResource" not in statement, logical_id
        for action in statement_actions(statement):
            assert isinstance(action, str), f"{logical_id}: non-literal action {action!r}"
            assert "*" not in action, f"{logical_id}: wildcard action {action!r}"


@pytest.mark.parametrize("role_id", [ROLE_ID, CHAT_ROLE_ID])
def test_each_role_grants_exactly_the_expected_actions(resources: dict[str, Any], role_id: str) -> None:
    granted: set[str] = set()
    for statement in role_statements(resources, role_id):
        granted |= statement_actions(statement)
    assert granted == ALL_EXPECTED_ACTIONS


def test_resource_star_only_for_documented_exceptions(resources: dict[str, Any]) -> None:
    for logical_id, statement in iter_statements(resources):
        targets = statement_resources(statement)
        if any(isinstance(t, str) and "*" in t for t in targets):
            assert targets == ["*"], f"{logical_id}: partial wildcard resource {targets!r}"
            extra = statement_actions(statement) - WILDCARD_RESOURCE_EXCEPTIONS
            assert not extra, f"{logical_id}: Resource '*' granted for {sorted(extra)}"


@pytest.mark.parametrize("role_id", [ROLE_ID, CHAT_ROLE_ID])
def test_dynamodb_access_is_the_five_item_actions_on_the_table_only(resources: dict[str, Any], role_id: str) -> None:
    dynamodb_actions: set[str] = set()
    for statement in role_statements(resources, role_id):
        actions = {a for a in statement_actions(statement) if a.lower().startswith("dynamodb:")}
        if not actions:
            continue
        assert actions == statement_actions(statement), f"{role_id}: mixed-service statement"
        assert statement_resources(statement) == [{"Fn::GetAtt": [TABLE_ID, "Arn"]}], role_id
        dynamodb_actions |= actions
    assert dynamodb_actions == DYNAMODB_ACTIONS


@pytest.mark.parametrize("role_id", [ROLE_ID, CHAT_ROLE_ID])
def test_secret_access_is_get_secret_value_on_the_parameter_only(resources: dict[str, Any], role_id: str) -> None:
    seen = False
    for statement in role_statements(resources, role_id):
        actions = {a for a in statement_actions(statement) if a.lower().startswith("secretsmanager:")}
        if not actions:
            continue
        seen = True
        assert statement_actions(statement) == SECRET_ACTIONS, role_id
        assert statement_resources(statement) == [{"Ref": SECRET_PARAM}], role_id
    assert seen


def test_logs_access_is_scoped_to_each_functions_own_log_group(
    resources: dict[str, Any], any_function: tuple[str, dict[str, Any]]
) -> None:
    name, props = any_function
    log_group_id = props["LoggingConfig"]["LogGroup"]["Ref"]
    seen = False
    for statement in role_statements(resources, ROLE_OF[name]):
        if any(a.startswith("logs:") for a in statement_actions(statement)):
            seen = True
            assert statement_actions(statement) <= LOG_ACTIONS, name
            assert statement_resources(statement) == [{"Fn::GetAtt": [log_group_id, "Arn"]}], name
    assert seen


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
# REST API and routes
# --------------------------------------------------------------------------
def test_api_is_regional_rest_api_without_cors(resources: dict[str, Any]) -> None:
    props = resources[API_ID]["Properties"]
    endpoint = props["EndpointConfiguration"]
    endpoint_type = endpoint["Type"] if isinstance(endpoint, dict) else endpoint
    # regional: streams may idle 5 minutes (edge-optimized: 30 s)
    assert endpoint_type == "REGIONAL"
    assert "Cors" not in props
    assert props["StageName"] == {"Ref": "StageName"}
    text = json.dumps(props).lower()
    assert "access-control-allow" not in text
    # no HTTP API (ApiGatewayV2) in the stack: the gateway is a REST API (the only kind that streams)
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


def _serving_function(resources: dict[str, Any], method: str, path: str) -> str:
    """Which function API Gateway invokes: an exact resource + method pair wins, else the greedy proxy."""
    exact, greedy = [], []
    for function_id in FUNCTION_IDS:
        for props in api_events(resources[function_id]["Properties"]).values():
            if props["Method"].upper() not in ("ANY", method) or not _route_matches(props["Path"], path):
                continue
            (greedy if "{" in props["Path"] else exact).append(function_id)
    assert len(exact) <= 1 and len(greedy) <= 1, (method, path, exact, greedy)
    found = exact or greedy
    assert found, f"{method} {path} reaches no function"
    return found[0]


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("GET", "/health", FUNCTION_ID),
        ("GET", "/v1/models", FUNCTION_ID),
        ("GET", "/v1/models/demo-agent", FUNCTION_ID),
        ("GET", "/v1/unknown-route", FUNCTION_ID),
        ("GET", "/", FUNCTION_ID),
        ("POST", CHAT_PATH, CHAT_FUNCTION_ID),
        # other methods fall back to the proxy, where the app answers 405
        ("GET", CHAT_PATH, FUNCTION_ID),
    ],
)
def test_every_route_reaches_the_right_function(
    resources: dict[str, Any], method: str, path: str, expected: str
) -> None:
    assert _serving_function(resources, method, path) == expected


def test_route_matcher_is_not_vacuous() -> None:
    assert _route_matches("/{proxy+}", "/v1/models/demo-agent")
    assert _route_matches("/v1/models/{model}", "/v1/models/demo-agent")
    assert not _route_matches("/v1/models/{model}", "/v1/models")
    assert not _route_matches("/health", "/v1/models")


def test_buffered_function_routes_everything_through_the_proxy(function: dict[str, Any]) -> None:
    routes = {(p["Method"].upper(), p["Path"]) for p in api_events(function).values()}
    assert routes == {("ANY", "/"), ("ANY", "/{proxy+}")}
    for props in api_events(function).values():
        assert props.get("ResponseTransferMode", "BUFFERED") == "BUFFERED", "Mangum cannot stream"


def test_chat_route_uses_rest_api_response_streaming(chat_function: dict[str, Any], template: dict[str, Any]) -> None:
    events = api_events(chat_function)
    assert len(events) == 1, "the streaming function serves POST /v1/chat/completions only"
    (props,) = events.values()
    assert (props["Method"].upper(), props["Path"]) == ("POST", CHAT_PATH)
    # SAM turns this into responseTransferMode STREAM and the .../response-streaming-invocations URI
    assert props["ResponseTransferMode"] == "RESPONSE_STREAM"
    # a streaming integration may run 15 minutes; it must not end before the function does
    timeout_ms = int(props["TimeoutInMillis"])
    assert timeout_ms == LAMBDA_MAX_TIMEOUT * 1000
    for seconds in resolve_number(template, chat_function["Timeout"]):
        assert seconds * 1000 <= timeout_ms


# --------------------------------------------------------------------------
# alarms
# --------------------------------------------------------------------------
def _alarms(resources: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: r["Properties"] for k, r in resources.items() if r["Type"] == "AWS::CloudWatch::Alarm"}


@pytest.mark.parametrize("function_id", FUNCTION_IDS)
@pytest.mark.parametrize("metric", ["Errors", "Throttles"])
def test_lambda_alarms_for_each_function(resources: dict[str, Any], function_id: str, metric: str) -> None:
    matching = [
        props
        for props in _alarms(resources).values()
        if props["Namespace"] == "AWS/Lambda"
        and props["MetricName"] == metric
        and props["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": function_id}}]
    ]
    assert len(matching) == 1, f"one {metric} alarm on {function_id}"
    props = matching[0]
    assert props["Statistic"] == "Sum"
    assert props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert int(props["Threshold"]) == 1
    assert props["TreatMissingData"] == "notBreaching"


def test_api_5xx_alarm(resources: dict[str, Any], template: dict[str, Any]) -> None:
    api_name = resources[API_ID]["Properties"]["Name"]
    matching = [
        props
        for props in _alarms(resources).values()
        if props["Namespace"] == "AWS/ApiGateway" and props["MetricName"] == "5XXError"
    ]
    assert len(matching) == 1
    props = matching[0]
    dims = {d["Name"]: d["Value"] for d in props["Dimensions"]}
    assert dims == {"ApiName": api_name, "Stage": {"Ref": "StageName"}}
    assert props["Statistic"] == "Sum"
    assert props["Threshold"] == {"Ref": "Api5xxAlarmThreshold"}
    assert int(template["Parameters"]["Api5xxAlarmThreshold"]["MinValue"]) >= 1


def test_alarms_notify_the_optional_topic(resources: dict[str, Any], template: dict[str, Any]) -> None:
    alarms = _alarms(resources)
    assert len(alarms) == 5
    notify = {"Fn::If": ["AlarmEmailSet", [{"Ref": "AlarmTopic"}], {"Ref": "AWS::NoValue"}]}
    for logical_id, props in alarms.items():
        assert props["AlarmActions"] == notify, logical_id
        assert props["OKActions"] == notify, logical_id
    topic = resources["AlarmTopic"]
    assert topic["Type"] == "AWS::SNS::Topic"
    assert topic["Condition"] == "AlarmEmailSet"
    assert topic["Properties"]["Subscription"] == [{"Protocol": "email", "Endpoint": {"Ref": "AlarmEmail"}}]
    assert template["Conditions"]["AlarmEmailSet"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmEmail"}, ""]}]}
    param = template["Parameters"]["AlarmEmail"]
    assert param["Default"] == ""
    pattern = re.compile(param["AllowedPattern"])
    assert pattern.fullmatch("") and pattern.fullmatch("ops@example.com")
    assert not pattern.fullmatch("not an address")


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
    assert outputs["ChatStreamFunctionName"]["Value"] == {"Ref": CHAT_FUNCTION_ID}
    assert outputs["LambdaWebAdapterLayerArn"]["Value"] == {"Fn::Sub": LWA_LAYER_SUB}
    assert outputs["AlarmTopicArn"]["Condition"] == "AlarmEmailSet"


# --------------------------------------------------------------------------
# sample events
# --------------------------------------------------------------------------
EVENT_ROUTES = {
    "health.json": ("GET", "/health"),
    "models.json": ("GET", "/v1/models"),
    "model.json": ("GET", "/v1/models/demo-agent"),
    "unknown-route.json": ("GET", "/v1/unknown-route"),
    "chat.json": ("POST", "/v1/chat/completions"),
    "chat-stream.json": ("POST", "/v1/chat/completions"),
    "tool-result.json": ("POST", "/v1/chat/completions"),
}


def test_every_event_file_is_known() -> None:
    files = {p.name for p in EVENTS_DIR.glob("*.json")}
    assert files == set(EVENT_ROUTES) | {"sam-local-env.json"}


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
    assert context["path"] == f"/{context['stage']}{path}"
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


def test_sample_event_request_ids_are_unique() -> None:
    ids = [
        json.loads((EVENTS_DIR / name).read_text(encoding="utf-8"))["requestContext"]["requestId"]
        for name in EVENT_ROUTES
    ]
    assert len(set(ids)) == len(ids)


def test_sam_local_env_file_buffers_the_adapter(resources: dict[str, Any], chat_function: dict[str, Any]) -> None:
    overrides = json.loads((EVENTS_DIR / "sam-local-env.json").read_text(encoding="utf-8"))
    for function_id, variables in overrides.items():
        assert function_id in resources, function_id
        defined = resources[function_id]["Properties"]["Environment"]["Variables"]
        # sam local only overrides variables the template defines
        assert set(variables) <= set(defined), function_id
    assert overrides[CHAT_FUNCTION_ID]["AWS_LWA_INVOKE_MODE"] == "buffered"


# --------------------------------------------------------------------------
# scripts/invoke-event: the Docker-free twin of sam local invoke
# --------------------------------------------------------------------------
def _invoke_event(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "LETTA_", "AWS_LAMBDA_", "POWERTOOLS_"))
    }
    # a loopback Letta address that answers nothing: these events never reach Letta
    env.update({"LETTA_BASE_URL": "http://127.0.0.1:9", "GATEWAY_STATE_PATH": str(tmp_path / "state.sqlite3")})
    return subprocess.run(
        [sys.executable, str(INVOKE_EVENT), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def _split_responses(stdout: str) -> list[tuple[str, str]]:
    """[(status line + headers, body), ...] from invoke-event's plain output."""
    chunks = stdout.split("\n\nHTTP ")
    chunks = [chunks[0]] + ["HTTP " + c for c in chunks[1:]]
    return [tuple(c.split("\n\n", 1)) for c in chunks]  # type: ignore[misc]


def test_invoke_event_runs_the_lambda_handler_with_event_files(tmp_path: Path) -> None:
    assert os.access(INVOKE_EVENT, os.X_OK)
    done = _invoke_event(tmp_path, "events/health.json", "events/unknown-route.json")
    assert done.returncode == 1, done.stderr  # one response is 400 or more
    (health_head, health_body), (missing_head, missing_body) = _split_responses(done.stdout)
    assert health_head.startswith("HTTP 200\n")
    assert "content-type: application/json" in health_head.lower()
    assert json.loads(health_body)["status"] == "ok"
    assert missing_head.startswith("HTTP 404\n")
    assert "message" in json.loads(missing_body)["error"]
    # the function's own JSON logs go to stderr, as with sam local invoke
    assert "GET /health -> 200" in done.stderr
    assert "GET /v1/unknown-route -> 404" in done.stderr


def test_invoke_event_json_output_is_the_raw_lambda_response(tmp_path: Path) -> None:
    done = _invoke_event(tmp_path, "--json", "events/health.json")
    assert done.returncode == 0, done.stderr
    response = json.loads(done.stdout)
    assert response["statusCode"] == 200
    assert json.loads(response["body"])["status"] == "ok"


def test_invoke_event_reports_configuration_errors(tmp_path: Path) -> None:
    done = _invoke_event(tmp_path, "-e", "LETTA_BASE_URL=ftp://nowhere", "events/health.json")
    assert done.returncode == 2
    assert "LETTA_BASE_URL" in done.stderr

#!/bin/bash
# Handler of the streaming chat function (ChatStreamFunction in template.yaml).
#
# The Lambda Web Adapter layer's wrapper (AWS_LAMBDA_EXEC_WRAPPER=/opt/bootstrap)
# runs this script instead of the Python runtime's own handler loop; the adapter
# waits until GET /health answers, then relays every invocation to this server
# over HTTP and streams the response back (AWS_LWA_INVOKE_MODE=response_stream).
#
# Import path, made explicit because no Python handler loop sets it up here:
#   $LAMBDA_TASK_ROOT    this function's code (the letta_gateway package)
#   /opt/python          the dependency layer (FastAPI, uvicorn, letta-client, ...)
#   $LAMBDA_RUNTIME_DIR  the runtime's own libraries (boto3/botocore live there)
set -euo pipefail

task_root="${LAMBDA_TASK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}"
export PYTHONPATH="${task_root}:/opt/python${LAMBDA_RUNTIME_DIR:+:${LAMBDA_RUNTIME_DIR}}${PYTHONPATH:+:${PYTHONPATH}}"
export PATH="${PATH}:${task_root}/bin:/opt/bin"
cd "${task_root}"

# Loopback only (the adapter is the only client); keep-alive longer than the
# adapter's pooled-connection idle time, so the adapter never reuses a
# connection uvicorn is closing; the gateway writes its own JSON access log.
exec python -m uvicorn letta_gateway.asgi:app \
  --host 127.0.0.1 \
  --port "${PORT:-8080}" \
  --timeout-keep-alive 75 \
  --no-access-log \
  --log-level warning

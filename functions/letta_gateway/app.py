"""The HTTP surface: thin routes over `Gateway`, OpenAI error envelopes for every failure."""

import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import __version__
from . import observability as log
from .auth import Principal
from .errors import GatewayError, InvalidRequest, MethodNotAllowed, NotFound, PayloadTooLarge
from .service import Gateway, ThreadRequest
from .wire import ChatCompletion, ChatCompletionRequest, ErrorResponse, Model, ModelList

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {status: {"model": ErrorResponse} for status in statuses}


V1_ERRORS = _errors(401, 404, 405, 413, 429, 500, 502, 504)


def error_response(error: GatewayError) -> JSONResponse:
    return JSONResponse(error.envelope(), status_code=error.status_code, headers=error.headers)


def _param(loc: tuple[Any, ...]) -> str | None:
    parts = [p for p in loc if p != "body"]
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif p in ("function-after[_object_schema(), FunctionDefinition]",):
            continue
        else:
            out += ("." if out else "") + str(p)
    return out or None


def validation_error(exc: RequestValidationError) -> InvalidRequest:
    errors = exc.errors()
    if not errors:
        return InvalidRequest("Invalid request body.")
    first = errors[0]
    loc = tuple(first.get("loc") or ())
    kind = first.get("type", "")
    if kind == "json_invalid":
        return InvalidRequest("The request body is not valid JSON.", code="invalid_json")
    if kind == "missing" and loc == ("body",):
        return InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    param = _param(loc)
    message = str(first.get("msg", "Invalid value"))
    where = f" at '{param}'" if param else ""
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return InvalidRequest(f"Invalid request{where}: {message}{more}.", param=param)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class RequestContext:
    """Pure ASGI middleware: body size limit (413), correlation id, one access log line per request."""

    def __init__(
        self, app: ASGIApp, max_body_bytes: int, on_finish: Callable[[int], Awaitable[None]] | None = None
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.on_finish = on_finish

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = dict(scope.get("headers") or ())
        fields = log.begin_request(_request_id(scope, headers))
        trace = headers.get(b"x-amzn-trace-id")
        if trace:
            log.bind(xray_trace_id=trace.decode("latin-1")[:256])
        status = {"code": 500}

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                message = {
                    **message,
                    "headers": [*message.get("headers", []), (b"x-request-id", fields["correlation_id"].encode())],
                }
            await send(message)

        length = headers.get(b"content-length")
        if length is not None and length.isdigit():
            if int(length) > self.max_body_bytes:
                await self._too_large(scope, receive, send_with_id)
            else:
                await self.app(scope, receive, send_with_id)
        else:
            # No declared length (chunked): read it all, within the limit, then hand it on.
            body, too_large = await self._read_limited(receive)
            if too_large:
                await self._too_large(scope, receive, send_with_id)
            else:
                await self.app(scope, _replay(body, receive), send_with_id)
        log.info(
            "request",
            method=scope.get("method"),
            path=scope.get("path"),
            status=status["code"],
            duration_ms=round((time.perf_counter() - started) * 1000, 2),
        )
        if status["code"] >= 400:
            log.metric("Errors" if status["code"] >= 500 else "ClientErrors")
        if self.on_finish is not None:
            try:
                await self.on_finish(status["code"])
            except Exception:
                log.error("recording the request's usage failed", exc_info=True)
        log.flush_metrics()

    async def _read_limited(self, receive: Receive) -> tuple[bytes, bool]:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks), False
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return b"", True
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), False

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(PayloadTooLarge(f"Request body exceeds {self.max_body_bytes} bytes."))
        await response(scope, receive, send)


def request_deadline(
    scope: Scope, headers: dict[bytes, bytes], budget_seconds: float | None, margin_seconds: float
) -> float | None:
    """When this request must be answered by (monotonic clock), from whatever knows: the Lambda context under
    Mangum, the invocation deadline the Lambda Web Adapter forwards, or the configured per-request budget."""
    now_mono, now_wall = time.monotonic(), time.time()
    candidates: list[float] = []
    if budget_seconds:
        candidates.append(now_mono + budget_seconds)
    context = scope.get("aws.context")
    if context is not None and hasattr(context, "get_remaining_time_in_millis"):
        candidates.append(now_mono + context.get_remaining_time_in_millis() / 1000)
    raw = headers.get(b"x-amzn-lambda-context")
    if raw:
        try:
            lambda_context = json.loads(raw)
            deadline_ms = lambda_context.get("deadline") or lambda_context.get("deadline_ms")
            if deadline_ms:
                candidates.append(now_mono + (float(deadline_ms) / 1000 - now_wall))
        except (ValueError, AttributeError, TypeError):
            pass
    return min(candidates) - margin_seconds if candidates else None


def _request_id(scope: Scope, headers: dict[bytes, bytes]) -> str | None:
    """API Gateway's request id: from the event under Mangum, from the forwarded context under the Lambda Web
    Adapter, else a caller-supplied request id."""
    event = scope.get("aws.event") or {}
    found = (event.get("requestContext") or {}).get("requestId")
    if found:
        return str(found)
    raw = headers.get(b"x-amzn-request-context")
    if raw:
        try:
            found = json.loads(raw).get("requestId")
        except (ValueError, AttributeError):
            found = None
        if found:
            return str(found)
    value = headers.get(b"x-amzn-requestid") or headers.get(b"x-request-id")
    return value.decode("latin-1")[:128] if value else None


def thread_request(headers: Any, stream: bool) -> ThreadRequest | None:
    """The thread headers: `X-Letta-Conversation-Id` (an existing conversation of the agent), or a chat key
    (`X-Letta-Chat-Key`; Open WebUI's `X-OpenWebUI-Chat-Id` on streamed requests only, since its title and tag
    requests carry the same id) mapped to a conversation the gateway creates on first use."""
    conversation = headers.get("x-letta-conversation-id") or None
    chat_key = headers.get("x-letta-chat-key") or (headers.get("x-openwebui-chat-id") if stream else None) or None
    mode = (headers.get("x-letta-thread-mode") or "").strip().lower() or None
    if mode not in (None, "agent", "auto"):
        raise InvalidRequest("X-Letta-Thread-Mode must be 'agent' or 'auto'.", param="X-Letta-Thread-Mode")
    for name, value in (("X-Letta-Conversation-Id", conversation), ("X-Letta-Chat-Key", chat_key)):
        if value is not None and len(value) > 256:
            raise InvalidRequest(f"{name} must be at most 256 characters.", param=name)
    if conversation is None and chat_key is None and mode is None:
        return None
    return ThreadRequest(conversation_id=conversation, chat_key=chat_key, mode=mode)


class GatewayHolder:
    """Builds the gateway on first use, so building the app does no I/O."""

    def __init__(self, gateway: Gateway | Callable[[], Gateway]) -> None:
        self._gateway = gateway if isinstance(gateway, Gateway) else None
        self._factory = None if isinstance(gateway, Gateway) else gateway

    def __call__(self) -> Gateway:
        if self._gateway is None:
            assert self._factory is not None
            self._gateway = self._factory()
        return self._gateway

    async def aclose(self) -> None:
        if self._gateway is not None:
            await self._gateway.agents.aclose()


def get_gateway(request: Request) -> Gateway:
    return request.app.state.gateway()  # type: ignore[no-any-return]


async def principal(request: Request, authorization: Annotated[str | None, Header()] = None) -> Principal:
    gateway = get_gateway(request)
    caller = await gateway.authenticate(authorization)
    slot = await gateway.admit(caller)
    log.set_caller(principal=caller, slot=slot)
    return caller


Caller = Annotated[Principal, Depends(principal)]


def create_app(
    gateway: Gateway | Callable[[], Gateway],
    *,
    max_body_bytes: int = 6 * 1024 * 1024,
    deadline_seconds: float | None = None,
    deadline_margin_seconds: float = 2.0,
) -> FastAPI:
    """The FastAPI app. `gateway` may be a factory, called on first use (no I/O at import or build time)."""

    holder = GatewayHolder(gateway)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await holder.aclose()

    app = FastAPI(
        lifespan=lifespan,
        title="Letta OpenAI Gateway",
        version=__version__,
        description="OpenAI-compatible chat completions over stateful Letta agents.",
        docs_url=None,
        redoc_url=None,
    )
    app.state.gateway = holder

    async def finish(status: int) -> None:
        caller = log.caller()
        if "principal" in caller:
            usage = {**log.request_usage(), "requests": 1, "errors": int(status >= 400)}
            await holder().finish_request(caller["principal"], caller.get("slot", False), usage)

    app.add_middleware(RequestContext, max_body_bytes=max_body_bytes, on_finish=finish)

    @app.exception_handler(GatewayError)
    async def _gateway_error(request: Request, exc: GatewayError) -> JSONResponse:
        if exc.status_code >= 500:
            log.warning("request failed", error_code=exc.code, status=exc.status_code)
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(validation_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return error_response(NotFound(f"Unknown path: {request.url.path}", code="unknown_url"))
        if exc.status_code == 405:
            return error_response(MethodNotAllowed(f"Method {request.method} is not allowed on {request.url.path}."))
        error = GatewayError(str(exc.detail), code="http_error")
        error.status_code = exc.status_code
        error.type = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return error_response(error)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error", exc_info=True)
        return error_response(GatewayError("The gateway failed unexpectedly.", code="internal_error"))

    @app.get("/health", include_in_schema=True)
    async def health() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    @app.get("/v1/models", response_model=ModelList, responses=V1_ERRORS)
    async def list_models(request: Request, caller: Caller) -> ModelList:
        return await get_gateway(request).list_models(caller)

    @app.get("/v1/models/{model:path}", response_model=Model, responses=V1_ERRORS)
    async def get_model(request: Request, model: str, caller: Caller) -> Model:
        return await get_gateway(request).get_model(caller, model)

    @app.post(
        "/v1/chat/completions",
        response_model=ChatCompletion,
        responses={
            200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}},
            **_errors(400, 409),
            **V1_ERRORS,
        },
    )
    async def chat_completions(request: Request, body: ChatCompletionRequest, caller: Caller) -> Response:
        gw = get_gateway(request)
        headers = dict(request.scope.get("headers") or ())
        deadline = request_deadline(request.scope, headers, deadline_seconds, deadline_margin_seconds)
        key = request.headers.get("idempotency-key") or None
        if key is not None and len(key) > 255:
            raise InvalidRequest("Idempotency-Key must be at most 255 characters.", param="Idempotency-Key")
        thread = thread_request(request.headers, bool(body.stream))
        if body.stream:
            chunks = await gw.open_stream(caller, body, deadline, key, thread)
            return StreamingResponse(chunks, media_type="text/event-stream", headers=SSE_HEADERS)
        completion = await gw.complete(caller, body, deadline, key, thread)
        return Response(completion.model_dump_json(), media_type="application/json")

    return app

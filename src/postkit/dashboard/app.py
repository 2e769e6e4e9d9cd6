"""The dashboard as an ASGI application (Starlette): one HTML page, its script and styles, a
JSON API under ``/api``, and Prometheus metrics at ``/metrics``.

The page (``static/``) renders everything from the API with DOM text nodes, never HTML strings,
so a payload or an error message is shown as text whatever it contains. Reads are GETs; every
action is a POST, which :class:`~postkit.dashboard.security.Guard` lets through only with the
page's CSRF token and never under ``--read-only``.

The API, per namespace ``{ns}`` (a name in the path is percent-encoded; ``.``, ``..`` and a
name that starts with ``~`` get a ``~`` in front, which the server takes off):

=======  ===========================================  =========================================
GET      /api/meta                                    namespaces, read-only flag, CSRF token
GET      /api/overview                                every namespace's queues and workers
GET      /api/ns/{ns}/overview                        ?after=: a page of queues, charts, workers
GET      /api/ns/{ns}/queues/{queue}                  a queue's counts and policy
GET      /api/ns/{ns}/queues/{queue}/jobs             ?state=pending|scheduled|running|dead
                                                      &cursor=
GET      /api/ns/{ns}/jobs/{id}                       a job, its errors and lineage
GET      /api/ns/{ns}/dead-letters                    ?queue=&error=&since=&until=&cursor=
GET      /api/ns/{ns}/schedules                       ?cursor=: a page of schedules, next and
                                                      last runs, broken
GET      /api/ns/{ns}/workers                         ?cursor=: a page of the registry and what
                                                      each worker runs
POST     /api/ns/{ns}/queues/{queue}/pause|resume
POST     /api/ns/{ns}/queues/{queue}/limits           {"concurrency": N, "rate": [N, seconds],
                                                      "group_concurrency": N,
                                                      "group_ordered": bool, "fair": bool}:
                                                      each key given is set (null: no
                                                      limit), others kept
POST     /api/ns/{ns}/queues/{queue}/purge            {"dry_run": true} counts; then
                                                      {"created_before": <its cutoff>}
POST     /api/ns/{ns}/jobs/{id}/cancel                a live job, with what waits for it
POST     /api/ns/{ns}/jobs/{id}/cancel-tree           the live jobs of the job's tree
POST     /api/ns/{ns}/jobs/{id}/redrive               a dead letter, as a new job
POST     /api/ns/{ns}/dead-letters/redrive            {"job_ids": [...]} or the filters,
                                                      "dry_run"
POST     /api/ns/{ns}/dead-letters/purge              the same
POST     /api/ns/{ns}/schedules/{name}/pause|resume
=======  ===========================================  =========================================

Names in a path are percent-encoded, each one path segment: ``emails%2Fhigh`` is the queue
``emails/high``. Errors are ``{"error": message}`` with 400 (a value the SDK or SQL refused), 403
(the role may not, or read-only), 404, 409 (a job that is running), 413 (a body over
:data:`MAX_BODY_BYTES`) or 503 (the database is unreachable).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from importlib import resources
from typing import Any
from urllib.parse import unquote_to_bytes

import psycopg
import psycopg_pool
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from postkit.dashboard.security import Guard
from postkit.dashboard.settings import DashboardSettings
from postkit.dashboard.source import BadRequest, DashboardSource, NotFound
from postkit.errors import PermissionDeniedError, PostkitError, ValidationError

logger = logging.getLogger("postkit.dashboard")

_STATIC = resources.files("postkit.dashboard") / "static"

MAX_BODY_BYTES = 1 << 20
"""The largest request body an action reads: a selection of 100,000 job ids fits."""

Handler = Callable[[Request, dict[str, Any]], dict[str, Any]]
"""An endpoint's work, run on a thread: the request and its JSON body (empty for a GET)."""


def create_app(settings: DashboardSettings) -> Starlette:
    """The dashboard for ``settings``; serve it with any ASGI server (``postkit dashboard``
    runs uvicorn). The connection pool opens when the server starts and closes when it
    stops."""
    source = DashboardSource(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        source.open()
        try:
            yield
        finally:
            await run_in_threadpool(source.close)

    def endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            try:
                body = await _json_body(request) if request.method == "POST" else {}
                result = await run_in_threadpool(handler, request, body)
            except _HTTP_ERRORS as exc:
                return _error(exc)
            return JSONResponse(result)

        return run

    def ns(request: Request) -> str:
        return _name(request, "ns")

    reads = [
        Route("/api/meta", endpoint(lambda r, b: source.meta())),
        Route("/api/overview", endpoint(lambda r, b: source.overview_all())),
        Route(
            "/api/ns/{ns}/overview",
            endpoint(lambda r, b: source.overview(ns(r), r.query_params.get("after") or None)),
        ),
        Route(
            "/api/ns/{ns}/queues/{queue}",
            endpoint(lambda r, b: source.queue(ns(r), _name(r, "queue"))),
        ),
        Route(
            "/api/ns/{ns}/queues/{queue}/jobs",
            endpoint(
                lambda r, b: source.jobs(
                    ns(r),
                    _name(r, "queue"),
                    r.query_params.get("state", "pending"),
                    r.query_params.get("cursor") or None,
                )
            ),
        ),
        Route(
            "/api/ns/{ns}/jobs/{job_id:int}",
            endpoint(lambda r, b: source.job(ns(r), r.path_params["job_id"])),
        ),
        Route(
            "/api/ns/{ns}/dead-letters",
            endpoint(
                lambda r, b: source.dead_letters(
                    ns(r),
                    queue=r.query_params.get("queue") or None,
                    error=r.query_params.get("error") or None,
                    failed_after=_time(r.query_params.get("since")),
                    failed_before=_time(r.query_params.get("until")),
                    cursor=r.query_params.get("cursor") or None,
                )
            ),
        ),
        Route(
            "/api/ns/{ns}/schedules",
            endpoint(lambda r, b: source.schedules(ns(r), r.query_params.get("cursor") or None)),
        ),
        Route(
            "/api/ns/{ns}/workers",
            endpoint(lambda r, b: source.workers(ns(r), r.query_params.get("cursor") or None)),
        ),
    ]
    post = ["POST"]
    actions = [
        Route(
            "/api/ns/{ns}/queues/{queue}/{verb:str}",
            endpoint(lambda r, b: _queue_action(source, ns(r), _name(r, "queue"), r, b)),
            methods=post,
        ),
        Route(
            "/api/ns/{ns}/jobs/{job_id:int}/cancel",
            endpoint(lambda r, b: source.cancel(ns(r), r.path_params["job_id"])),
            methods=post,
        ),
        Route(
            "/api/ns/{ns}/jobs/{job_id:int}/cancel-tree",
            endpoint(lambda r, b: source.cancel_tree(ns(r), r.path_params["job_id"])),
            methods=post,
        ),
        Route(
            "/api/ns/{ns}/jobs/{job_id:int}/redrive",
            endpoint(
                lambda r, b: source.redrive(
                    ns(r),
                    job_ids=[r.path_params["job_id"]],
                    queue=None,
                    error=None,
                    failed_after=None,
                    failed_before=None,
                    dry_run=False,
                )
            ),
            methods=post,
        ),
        Route(
            "/api/ns/{ns}/dead-letters/redrive",
            endpoint(lambda r, b: source.redrive(ns(r), **_dead_letter_filters(b))),
            methods=post,
        ),
        Route(
            "/api/ns/{ns}/dead-letters/purge",
            endpoint(lambda r, b: source.purge_dead_letters(ns(r), **_dead_letter_filters(b))),
            methods=post,
        ),
        Route(
            "/api/ns/{ns}/schedules/{name}/{verb:str}",
            endpoint(
                lambda r, b: source.set_schedule_paused(
                    ns(r), _name(r, "name"), _pause_verb(r.path_params["verb"])
                )
            ),
            methods=post,
        ),
    ]
    routes = [
        Route("/", _page, methods=["GET"]),
        Route("/metrics", _metrics_endpoint(source), methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=str(_STATIC)), name="static"),
        *reads,
        *actions,
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.source = source
    return Guard(_RawApiPaths(app), settings)  # type: ignore[return-value]


class _RawApiPaths:
    """Routes ``/api/`` on the path as sent, still percent-encoded: a name holding a ``/``
    (``%2F``) stays one segment, where the decoded path would split it. :func:`_name`
    decodes each name."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path")
        if scope["type"] == "http" and raw and scope["path"].startswith("/api/"):
            scope = {**scope, "path": raw.decode("latin-1")}
        await self.app(scope, receive, send)


def _name(request: Request, param: str) -> str:
    """A name from the path, percent-decoded as UTF-8, then unescaped: a segment that starts
    with ``~`` is the name after it. The page escapes so the names ``.`` and ``..`` (which a
    URL's path cannot hold: a browser resolves them, percent-encoded too) and every name that
    starts with ``~`` (so that the escape stays reversible)."""
    value = str(request.path_params[param])
    try:
        name = unquote_to_bytes(value.encode("latin-1")).decode("utf-8")
    except UnicodeError:
        raise BadRequest(f"{param} is not percent-encoded UTF-8: {value!r}") from None
    return name[1:] if name.startswith("~") else name


async def _page(request: Request) -> Response:
    return FileResponse(str(_STATIC / "index.html"), media_type="text/html")


def _metrics_endpoint(source: DashboardSource) -> Callable[[Request], Awaitable[Response]]:
    """``/metrics``: the queue gauges of every namespace shown, read at each scrape
    (:mod:`postkit.dashboard.metrics`). Without prometheus_client (the ``metrics`` extra) it
    answers 501 with the install command."""

    async def metrics(request: Request) -> Response:
        try:
            from postkit.dashboard.metrics import render_metrics
        except ImportError:
            return JSONResponse(
                {"error": "metrics need prometheus_client: pip install 'postkit-queue[metrics]'"},
                status_code=501,
            )
        try:
            body, content_type = await run_in_threadpool(render_metrics, source)
        except _HTTP_ERRORS as exc:
            return _error(exc)
        return Response(body, media_type=content_type)

    return metrics


def _queue_action(
    source: DashboardSource, namespace: str, queue: str, request: Request, body: dict[str, Any]
) -> dict[str, Any]:
    verb = request.path_params["verb"]
    if verb == "limits":
        return source.set_limits(namespace, queue, _limits(body))
    if verb == "purge":
        return source.purge_queue(
            namespace,
            queue,
            created_before=_time(body.get("created_before")),
            dry_run=_dry_run(body),
        )
    return source.set_paused(namespace, queue, _pause_verb(verb))


LIMITS = ("concurrency", "rate", "group_concurrency", "group_ordered", "fair")
"""The flow limits a POST to a queue's ``limits`` may set."""


def _limits(body: dict[str, Any]) -> dict[str, Any]:
    """The flow limits of a ``limits`` body: those it names, each as given (the SDK checks
    the values); a name it does not know is refused."""
    unknown = sorted(set(body) - set(LIMITS))
    if unknown:
        raise BadRequest(f"unknown limit {unknown[0]!r}: the limits are {', '.join(LIMITS)}")
    for flag in ("group_ordered", "fair"):
        if flag in body and body[flag] is None:
            body = {**body, flag: False}
    return body


def _pause_verb(verb: str) -> bool:
    if verb not in ("pause", "resume"):
        raise NotFound(f"no action {verb!r}")
    return verb == "pause"


def _dead_letter_filters(body: dict[str, Any]) -> dict[str, Any]:
    job_ids = body.get("job_ids")
    if job_ids is not None and not (
        isinstance(job_ids, list) and all(type(i) is int for i in job_ids)
    ):
        raise BadRequest("job_ids must be a list of job ids")
    return {
        "job_ids": job_ids,
        "queue": body.get("queue") or None,
        "error": body.get("error") or None,
        "failed_after": _time(body.get("since")),
        "failed_before": _time(body.get("until")),
        "dry_run": _dry_run(body),
    }


def _dry_run(body: dict[str, Any]) -> bool:
    """The body's ``dry_run``: absent is false, anything but true or false is refused (a
    ``null`` is a client's unset value, not a request to delete)."""
    value = body.get("dry_run", False)
    if not isinstance(value, bool):
        raise BadRequest(f"dry_run must be true or false, got {json.dumps(value)}")
    return value


def _time(value: Any) -> datetime | None:
    if value in (None, ""):
        return None
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        raise BadRequest(f"not an ISO 8601 time: {value!r}") from None
    if moment.tzinfo is None:
        raise BadRequest(f"a time needs its offset (Z or +hh:mm): {value!r}")
    return moment


async def _json_body(request: Request) -> dict[str, Any]:
    """The body as a JSON object, read up to :data:`MAX_BODY_BYTES`."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise TooLarge(f"the request body is over {MAX_BODY_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise TooLarge(f"the request body is over {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python reads
        raise BadRequest("the request body is not JSON (or nested too deep)") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


class TooLarge(BadRequest):
    """A request body over :data:`MAX_BODY_BYTES`."""


_HTTP_ERRORS = (
    BadRequest,
    NotFound,
    PostkitError,
    psycopg.Error,
    psycopg_pool.PoolTimeout,
)


def _error(exc: BaseException) -> JSONResponse:
    """An exception as the API's error response, its message on one line."""
    status = 500
    if isinstance(exc, TooLarge):
        status = 413
    elif isinstance(exc, (BadRequest, ValidationError)):
        status = 400
    elif isinstance(exc, NotFound):
        status = 404
    elif isinstance(exc, (PermissionDeniedError, psycopg.errors.InsufficientPrivilege)):
        status = 403
    elif isinstance(exc, (psycopg.OperationalError, psycopg_pool.PoolTimeout)):
        status = 503
    diag = getattr(exc, "diag", None)
    text = getattr(diag, "message_primary", None) or str(exc) or type(exc).__name__
    if status == 500:
        logger.exception("dashboard request failed", exc_info=exc)
    return JSONResponse({"error": " ".join(text.split())}, status_code=status)

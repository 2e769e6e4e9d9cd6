"""Every exception Postkit raises, in one hierarchy under :class:`PostkitError`.

Errors raised inside the SQL module carry a SQLSTATE of the class ``PKQ``; :data:`SQLSTATE_ERRORS`
maps each one to its exception here, :func:`translate_error` turns a driver error into it, and a
test keeps that table in step with the SQL files.

Driver errors that Postkit does not own (a lost connection, a serialization failure, a
deadlock) are not wrapped: they reach the caller as the driver raised them, so existing
retry logic keeps working.
"""

from __future__ import annotations

from datetime import timedelta

LONGEST_BACKOFF = timedelta(days=30)
"""The longest backoff a nack takes (the SQL module's limit, postkit.queue.limits), and so the
longest delay of :class:`RetryLater`. Defined here, below the SDK that imports this module."""


class PostkitError(Exception):
    """Base class of every Postkit exception."""


class ConfigurationError(PostkitError):
    """Postkit cannot find or start a database: a bad DSN, or no embedded server available."""


class MetricsUnavailableError(PostkitError):
    """Metrics were asked for but cannot be served: prometheus_client is not installed
    (``pip install 'postkit-queue[metrics]'``), or the metrics address cannot be bound."""


class SchemaNotInstalledError(PostkitError):
    """The queue schema is missing or older than this SDK needs. Run ``postkit install``."""


class SchemaMismatchError(SchemaNotInstalledError):
    """The installed schema was set up from different migration files than this Postkit
    ships (an edited or foreign migration): installing over it could corrupt it."""


class ClientClosedError(PostkitError):
    """The cursor or connection given to the client is closed."""


class ValidationError(PostkitError, ValueError):
    """An argument is invalid. Raised before anything is written."""


class InvalidNameError(ValidationError):
    """A namespace, queue, worker id or unique key is null, blank (made only of spaces of any
    kind), not text, too long, or holds a control or format character."""


class InvalidPayloadError(ValidationError):
    """A payload is missing, not JSON-serializable or holds text PostgreSQL cannot store."""


class InvalidPriorityError(ValidationError):
    """A priority is not an integer from -32768 to 32767."""


class InvalidMaxAttemptsError(ValidationError):
    """max_attempts is not an integer from 1 to 1000."""


class InvalidDurationError(ValidationError):
    """A delay, visibility timeout, extension, backoff or retention is negative (or has a
    negative part), zero where not allowed, too long, or not a duration."""


class InvalidRunAtError(InvalidDurationError):
    """A push's ``run_at`` is not a datetime, is naive (without a time zone: which clock it
    means is unknown), is more than 3650 days ahead, or is given together with ``delay``."""


class InvalidArgumentsError(ValidationError, TypeError):
    """A task's arguments do not fit its function's signature (a missing or unknown argument,
    too many positional ones), hold a value JSON cannot carry exactly or a pydantic model's
    argument that does not validate, or a task's declaration does not fit its function (options
    that name arguments it does not have, a transactional task without a cursor first)."""


class InvalidJobIdError(ValidationError):
    """A job id is missing or not an integer (or an array of job ids is malformed)."""


class InvalidLimitError(ValidationError):
    """A limit (how many jobs or rows to return) is out of range."""


class InvalidClaimTokenError(ValidationError):
    """A claim token is not a UUID, or a settle names no claim: a bare job id, without the
    claim token or the worker_id the job was claimed under."""


class InvalidWorkerError(ValidationError):
    """A worker's registration is invalid: its kind is not worker or ticker, or its pid or
    concurrency is out of range."""


class InvalidTraceContextError(ValidationError):
    """A job's trace context is not a JSON object of strings (a W3C propagation carrier such as
    ``{"traceparent": "00-..."}``), is over 1024 bytes as JSON text, or a batch's trace
    contexts are not one per payload."""


class InvalidResultError(ValidationError):
    """A job's result (what its handler returned, given to ack) is not JSON-serializable, holds
    text PostgreSQL cannot store, or is over 1 MiB as JSON text (``limits.RESULT_BYTES``); or
    the results of a batch of acks are not one per job."""


class InvalidFlowControlError(ValidationError):
    """A queue's flow limit is out of range (concurrency 1 to 100000, a rate of 1 to 100000
    claims per period of up to a day, group_concurrency 1 to 10000), a rate lacks its limit or
    its period, or group_ordered is asked with a group_concurrency above 1."""


class FlowControlIsolationError(ValidationError):
    """A queue with flow limits was pulled inside a REPEATABLE READ or SERIALIZABLE
    transaction: its claims count what runs at the moment they take their turn, which a
    snapshot taken earlier cannot see. Pull it in a READ COMMITTED transaction (PostgreSQL's
    default, and the worker's)."""


class ResultTimeoutError(PostkitError, TimeoutError):
    """``wait_for_result`` waited its whole timeout and the job has not finished: it is still
    pending, scheduled or running. ``result`` is what ``result`` said last (a ``JobResult``);
    the job goes on, and a later wait may still see it finish. Also a built-in TimeoutError."""

    def __init__(self, message: str, result: object) -> None:
        # One argument: OSError (TimeoutError's base) reads two as an errno and a message.
        super().__init__(message)
        self.result = result


class ListenUnavailableError(PostkitError):
    """``wait_for_result`` cannot wait on the client's connection: waiting takes LISTEN, which
    needs a psycopg 3 connection in autocommit mode (inside a transaction LISTEN takes effect
    only at commit, and the client never commits the caller's). Use a ``ResultListener``, whose
    connection is its own, or a client on an autocommit connection."""

    def __init__(
        self,
        message: str = (
            "wait_for_result waits on the client's connection with LISTEN, which needs a "
            "psycopg 3 connection in autocommit mode: use a ResultListener (a connection of "
            "its own), or a client on such a connection"
        ),
    ) -> None:
        super().__init__(message)


class InvalidStateError(ValidationError):
    """A job state filter is not one of the job states (pending, scheduled, running, waiting,
    dead, cancelled), or a queue's paused flag is NULL."""


class InvalidDependencyError(ValidationError):
    """A push's ``depends_on`` is not a list of job ids, lists more than 10,000, or names a job
    a child cannot wait for: one unknown in the namespace (never pushed, or completed in a
    queue that keeps neither results nor completed jobs, or pruned), dead-lettered or
    cancelled."""


class InvalidProgressError(ValidationError):
    """A progress report's fraction is not a number from 0 to 1, or its note is not text of at
    most 200 characters."""


class WorkflowStepError(ValidationError):
    """A workflow step cannot be recorded at this position: a step is recorded there already
    (a replay met a step it should have found, or two transactions of one claim raced), the
    step before it is not, or the position is out of range (0 to 99,999)."""


class WorkflowEventError(ValidationError):
    """An event cannot be sent to this run: it is not live (finished, or unknown), or it has an
    event of that name already, sent without the same idempotency key."""


class QueueFullError(ValidationError):
    """A push would make its queue hold more pending jobs than its ``max_pending``
    (backpressure): the push is refused and nothing of it is written. The SQL module raises it,
    which aborts the caller's transaction: push inside a savepoint (``with
    connection.transaction():``) to catch it and go on."""


class InvalidScheduleError(ValidationError):
    """A schedule's cron expression, time zone or interval is invalid."""


class InvalidAccessError(ValidationError):
    """A role does not exist, or an access kind is not producer, worker or operator."""


class PermissionDeniedError(PostkitError):
    """The current role may not do this: its access kind does not include the function (see
    ``grant_access``), tenant isolation keeps it out of that namespace, or it wrote to a queue
    table by hand."""


class PermanentError(PostkitError):
    """Raise from a worker handler to fail the job for good: it moves to the dead-letter queue
    with this error, whatever attempts it has left."""


class RetryLater(PostkitError):
    """Raise from a worker handler to retry the job after ``delay`` seconds (or a timedelta)
    instead of the queue's exponential backoff. It still counts as a failed attempt."""

    def __init__(self, message: str = "retry requested", *, delay: float | timedelta) -> None:
        longest = LONGEST_BACKOFF
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not (0 <= seconds <= longest.total_seconds())
        ):
            raise InvalidDurationError(
                f"RetryLater delay must be between 0 seconds and {longest.days} days, got {delay!r}"
            )
        super().__init__(message)
        self.delay = delay


# SQLSTATE raised by the SQL module -> the exception the SDK raises for it.
SQLSTATE_ERRORS: dict[str, type[PostkitError]] = {
    "PKQ01": InvalidNameError,
    "PKQ02": InvalidPayloadError,
    "PKQ03": InvalidPriorityError,
    "PKQ04": InvalidMaxAttemptsError,
    "PKQ05": InvalidDurationError,
    "PKQ06": InvalidJobIdError,
    "PKQ07": InvalidLimitError,
    "PKQ09": InvalidStateError,
    "PKQ10": InvalidScheduleError,
    "PKQ11": InvalidAccessError,
    "PKQ12": SchemaMismatchError,
    "PKQ13": InvalidClaimTokenError,
    "PKQ14": InvalidWorkerError,
    "PKQ15": InvalidTraceContextError,
    "PKQ16": InvalidResultError,
    "PKQ17": InvalidFlowControlError,
    "PKQ18": FlowControlIsolationError,
    "PKQ19": InvalidDependencyError,
    "PKQ20": InvalidProgressError,
    "PKQ21": WorkflowStepError,
    "PKQ22": WorkflowEventError,
    "PKQ23": QueueFullError,
    # Raised by PostgreSQL itself when a role lacks a privilege or breaks a row-level policy.
    "42501": PermissionDeniedError,  # insufficient_privilege
    # The schema, or one of its functions, is not there: not installed, or an older version.
    "3F000": SchemaNotInstalledError,  # invalid_schema_name
    "42883": SchemaNotInstalledError,  # undefined_function
}


def translate_error(exc: BaseException) -> PostkitError | None:
    """The Postkit exception for a driver error raised by the SQL module, or None for any
    other error (which the caller re-raises unchanged).

    Reads the SQLSTATE the way psycopg 3 (``sqlstate``) and psycopg2 (``pgcode``) expose it,
    also through Django's wrapper (the driver error is its ``__cause__``).
    """
    for candidate in (exc, exc.__cause__):
        if candidate is None:
            continue
        sqlstate = getattr(candidate, "sqlstate", None) or getattr(candidate, "pgcode", None)
        error_class = SQLSTATE_ERRORS.get(sqlstate or "")
        if error_class is None:
            continue
        diag = getattr(candidate, "diag", None)
        message = getattr(diag, "message_primary", None) or str(candidate)
        if error_class is SchemaNotInstalledError:
            if "postkit_queue" not in message:
                return None
            message = (
                f"{message}. The Postkit queue schema is missing or older than this SDK: "
                "run `postkit install` (or postkit.queue.install(connection))"
            )
        if error_class is PermissionDeniedError and message.startswith(
            "permission denied for function"
        ):
            message = (
                f"{message}: the role's Postkit access does not include it (producers push, "
                "workers also pull and settle, operators also inspect and steer; see "
                "postkit_queue.grant_access or `postkit install --grant ROLE:KIND`)"
            )
        return error_class(message.removeprefix("postkit: "))
    return None


__all__ = [
    "LONGEST_BACKOFF",
    "SQLSTATE_ERRORS",
    "ClientClosedError",
    "ConfigurationError",
    "FlowControlIsolationError",
    "InvalidAccessError",
    "InvalidArgumentsError",
    "InvalidClaimTokenError",
    "InvalidDependencyError",
    "InvalidDurationError",
    "InvalidFlowControlError",
    "InvalidJobIdError",
    "InvalidLimitError",
    "InvalidMaxAttemptsError",
    "InvalidNameError",
    "InvalidPayloadError",
    "InvalidPriorityError",
    "InvalidProgressError",
    "InvalidResultError",
    "InvalidRunAtError",
    "InvalidScheduleError",
    "InvalidStateError",
    "InvalidTraceContextError",
    "InvalidWorkerError",
    "ListenUnavailableError",
    "MetricsUnavailableError",
    "PermanentError",
    "PermissionDeniedError",
    "PostkitError",
    "QueueFullError",
    "ResultTimeoutError",
    "RetryLater",
    "SchemaMismatchError",
    "SchemaNotInstalledError",
    "ValidationError",
    "WorkflowEventError",
    "WorkflowStepError",
    "translate_error",
]

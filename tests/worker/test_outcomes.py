"""The worker's rule for a handler that raised, as a pure function the worker's executor and
postkit.testing's drain both settle by."""

from __future__ import annotations

from datetime import timedelta

from postkit.errors import PermanentError, RetryLater
from postkit.worker.outcomes import settlement_of


def raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as caught:
        return caught


def test_a_permanent_error_fails_the_job_with_its_summary() -> None:
    settlement = settlement_of(raised(PermanentError("no such user")))

    assert settlement.action == "fail"
    assert settlement.error.startswith("PermanentError: no such user\n")
    assert settlement.backoff is None


def test_retry_later_nacks_with_the_delay_it_names_in_seconds() -> None:
    assert settlement_of(raised(RetryLater("busy", delay=timedelta(minutes=2)))).backoff == 120.0
    assert settlement_of(raised(RetryLater("busy", delay=7))).backoff == 7.0


def test_any_other_exception_nacks_with_the_queues_backoff_and_a_traceback() -> None:
    settlement = settlement_of(raised(ValueError("boom")))

    assert (settlement.action, settlement.backoff) == ("nack", None)
    assert settlement.error.startswith("ValueError: boom\n")
    assert 'File "' in settlement.error

# Generated from dead_letters_async.py by tools/async_to_sync.py: edit that file, not this one.
"""The dead-letter calls of the queue client: list, search, count, redrive and purge dead letters,
and follow a job's lineage.

dead_letters_async.py is the source of both: :class:`AsyncDeadLetters`, which
:class:`~postkit.queue.client_async.AsyncQueueClient` inherits, is written here, and
dead_letters.py (``DeadLetters``, which ``QueueClient`` inherits) is generated from it by
tools/async_to_sync.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from postkit.queue import limits, protocol
from postkit.queue.calls import Calls
from postkit.queue.protocol import Duration
from postkit.queue.records import (
    DeadLetter,
    DeadLetterPosition,
    DeadLetterSearch,
    LineageStep,
    Redriven,
)


class DeadLetters(Calls):
    """The dead-letter methods of the queue client (AsyncQueueClient inherits this class, and
    QueueClient its generated twin)."""

    def dead_letters(
        self,
        queue: str | None = None,
        *,
        limit: int = 100,
        failed_after: datetime | None = None,
        failed_before: datetime | None = None,
        error_contains: str | None = None,
        include_redriven: bool = False,
        after: DeadLetterPosition | None = None,
    ) -> list[DeadLetter]:
        """The dead letters of this namespace, newest first: of one queue, failed in a time
        range, or whose last error contains a substring (case-insensitive), if given.

        Each keeps the payload, the last error and every attempt's error, the attempt count,
        the queue, the last worker and the timestamps. Redriven dead letters are left out
        unless ``include_redriven``. For the next page, pass the last one of this page as
        ``after``.
        """
        return self._run(
            protocol.operations.dead_letters(
                self._namespace,
                queue,
                limit=limit,
                failed_after=failed_after,
                failed_before=failed_before,
                error_contains=error_contains,
                include_redriven=include_redriven,
                after=after,
            )
        )

    def count_dead_letters(
        self,
        queue: str | None = None,
        *,
        failed_after: datetime | None = None,
        failed_before: datetime | None = None,
        include_redriven: bool = False,
        cap: int = 10_000,
    ) -> int:
        """How many dead letters :meth:`dead_letters` would list with these filters, had it no
        limit: exact up to ``cap``, then ``cap`` (read it as "at least"). The count stops at
        ``cap`` rows of an index range, so it stays fast on any dead-letter queue. A purge's
        confirmation counts with ``failed_before`` and ``include_redriven=True``."""
        return self._run(
            protocol.operations.count_dead_letters(
                self._namespace,
                queue,
                failed_after=failed_after,
                failed_before=failed_before,
                include_redriven=include_redriven,
                cap=cap,
            )
        )

    def search_dead_letters(
        self,
        error_contains: str,
        queue: str | None = None,
        *,
        limit: int = 100,
        failed_after: datetime | None = None,
        failed_before: datetime | None = None,
        include_redriven: bool = False,
        after: DeadLetterPosition | None = None,
        scan_limit: int = limits.SEARCH_SCAN,
    ) -> DeadLetterSearch:
        """The dead letters whose last error contains ``error_contains`` (case-insensitive),
        newest first, with :meth:`dead_letters`' other filters, reading at most
        ``scan_limit`` dead letters of the namespace per call.

        No index finds a substring, so :meth:`dead_letters` with ``error_contains`` reads
        every dead letter when few match; this search reads the newest ``scan_limit`` (from
        ``after`` on, within the failed-at window; the queue filter applies to those) and
        says where it stopped: ``cut`` when it found fewer matches than ``limit`` before its
        bound, and ``next_after`` to search on from there.

        Raises:
            InvalidNameError: an empty ``error_contains``.
        """
        return self._run(
            protocol.operations.search_dead_letters(
                self._namespace,
                error_contains,
                queue,
                limit=limit,
                failed_after=failed_after,
                failed_before=failed_before,
                include_redriven=include_redriven,
                after=after,
                scan_limit=scan_limit,
            )
        )

    def redrive(
        self,
        job_ids: Sequence[int] | None = None,
        *,
        queue: str | None = None,
        failed_after: datetime | None = None,
        failed_before: datetime | None = None,
        error_contains: str | None = None,
        to_queue: str | None = None,
        limit: int = 1000,
        dry_run: bool = False,
    ) -> list[Redriven]:
        """Retry dead letters as new jobs with fresh attempts: the ones in ``job_ids``, or else
        every one matching the filters, into their own queue or ``to_queue``.

        Each dead letter is redriven at most once, even by two operators at once; it stays in
        the dead-letter queue, linked to its new job (``redriven_job_id``). With ``dry_run``
        nothing changes: the result is what would be retried.
        """
        return self._run(
            protocol.operations.redrive(
                self._namespace,
                job_ids=job_ids,
                queue=queue,
                failed_after=failed_after,
                failed_before=failed_before,
                error_contains=error_contains,
                to_queue=to_queue,
                limit=limit,
                dry_run=dry_run,
            )
        )

    def job_lineage(self, job_id: int, *, limit: int = 100) -> list[LineageStep]:
        """The chain of redrives ``job_id`` is part of, oldest first: the dead letters it was
        retried from, itself, and the jobs it was retried as, each with where it is now (live,
        dead, archived as completed, or gone), up to ``limit`` steps each way. Empty when the
        job is nowhere and no redrive names it. One index probe per step."""
        return self._run(protocol.operations.job_lineage(self._namespace, job_id, limit=limit))

    def purge_dead_letters(
        self,
        *,
        older_than: Duration | None = None,
        failed_before: datetime | None = None,
        queue: str | None = None,
        job_ids: Sequence[int] | None = None,
        failed_after: datetime | None = None,
    ) -> int:
        """Delete the dead letters (of one queue, if given), retried or not, that failed more
        than ``older_than`` ago by the queue's clock, or before ``failed_before``; give exactly
        one. With ``failed_before``, the purge may also be narrowed to ``job_ids`` and to those
        failed at or after ``failed_after``.

        To show what will go before deleting it, read the cutoff once (:meth:`clock`, minus
        an age), count with :meth:`count_dead_letters` (the same filters, with
        ``include_redriven=True``) and purge with the same ``failed_before``: ``older_than``
        is measured again when the purge runs. Returns how many were deleted.

        Raises:
            InvalidDurationError: neither or both of ``older_than`` and ``failed_before``, or
                ``job_ids`` or ``failed_after`` with ``older_than``.
            PermissionDeniedError: the role lacks operator access.
        """
        return self._run(
            protocol.operations.purge_dead_letters(
                self._namespace,
                older_than=older_than,
                failed_before=failed_before,
                queue=queue,
                job_ids=job_ids,
                failed_after=failed_after,
            )
        )

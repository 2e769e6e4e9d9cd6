"""What the dashboard reads and does, through the SDK's operator verbs on a connection pool.

Every method opens one pooled connection, runs its calls as the DSN's role and commits; the SQL
functions decide what that role may see and do (an action it may not take raises
PermissionDeniedError, which the API answers with 403). Nothing here reads a table: every read
is an SDK call whose SQL is index-bounded (stats' capped counts, keyset pages), so no page scans
the jobs.

Results are plain JSON values (:func:`postkit.queue.records.to_jsonable`): times in ISO 8601,
durations in seconds. A list shows a short preview of each payload, the job page the whole
payload; a payload Python cannot decode (``payload_error``) is shown as that error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from psycopg_pool import ConnectionPool

from postkit import __version__
from postkit.dashboard.rows import (
    dead_letter_row,
    job_detail,
    job_row,
    pretty_value,
    preview,
    stats_row,
)
from postkit.dashboard.settings import DashboardSettings
from postkit.errors import PostkitError
from postkit.queue import QueueClient
from postkit.queue.records import JobCursor, QueueStats, to_jsonable

PAGE_SIZE = 50
"""Rows per page of a list."""

STATS_CAP = 10_000
"""Live counts are exact up to here, then shown as "10,000+": each count stops there."""

COUNT_CAP = 10_000
"""Dead-letter counts (a page's total, a dry run's) stop here."""

GROUP_KEYS = 20
"""How many group keys a queue's page lists; `postkit queue groups` pages through them all."""

TREE_SIZE = 200
"""How many jobs of a job's tree its page shows (the root and the nearest generations)."""

SEARCH_SCAN = 2_000
"""How many dead letters one page of an error-text search reads."""

ACTION_LIMIT = 10_000
"""The most dead letters one redrive retries; the page says to repeat it for more."""

ALL_NAMESPACES_SHOWN = 50
"""How many namespaces the view across namespaces reads; it says how many more there are."""

HISTORY = timedelta(hours=1)
"""How far back the overview's charts go."""

CHARTED_QUEUES = 12
"""How many queues the overview charts: the busiest of the last hour. A chart for each queue of
a namespace with a thousand queues would redraw a thousand canvases at every refresh."""

OVERVIEW_QUEUES = 100
"""How many queues a page of the overview lists, in name order (``next_after`` leads to the
next page): each queue's counts cost a few index probes, so a namespace of thousands of queues
is read a page at a time. The view across namespaces lists as many of each namespace's."""


class NotFound(LookupError):
    """No such job, dead letter, queue or namespace for this dashboard."""


@dataclass(frozen=True)
class _DeadLetterPosition:
    failed_at: datetime
    job_id: int


class DashboardSource:
    """The dashboard's data: one instance per server, over a pool of ``settings.pool_size``
    connections opened lazily."""

    def __init__(self, settings: DashboardSettings) -> None:
        self.settings = settings
        self.pool = ConnectionPool(
            settings.dsn,
            min_size=1,
            max_size=settings.pool_size,
            open=False,
            name="postkit-dashboard",
            # A page waits at most this long for a connection: a database that is down
            # answers 503 within seconds, not after psycopg_pool's 30 s default.
            timeout=5.0,
            # psycopg_pool retries a failed connection with a doubling delay for 5 minutes:
            # after an outage of a minute its next try comes a minute after the database is
            # back. Giving up after 5 s lets the next page's wait start a new try at once.
            reconnect_timeout=5.0,
            # Each connection is tested as it is handed out: one the server cut (a restart,
            # a failover, an idle timeout) is replaced instead of failing a page with 503.
            check=ConnectionPool.check_connection,
            kwargs={"application_name": "postkit dashboard"},
        )

    def open(self) -> None:
        self.pool.open(wait=False)

    def close(self) -> None:
        self.pool.close()

    @contextlib.contextmanager
    def client(self, namespace: str) -> Iterator[QueueClient]:
        """A QueueClient on a pooled connection, committed when the block ends without an
        error and rolled back otherwise."""
        self.check_namespace(namespace)
        with self.pool.connection() as connection, connection.cursor() as cursor:
            yield QueueClient(cursor, namespace=namespace)

    def check_namespace(self, namespace: str) -> None:
        if self.settings.namespaces and namespace not in self.settings.namespaces:
            raise NotFound(f"this dashboard does not show namespace {namespace!r}")

    # ---------------------------------------------------------------------------------------
    # Reads
    # ---------------------------------------------------------------------------------------

    def meta(self) -> dict[str, Any]:
        """What the page needs before anything else: the namespaces, whether actions are
        allowed, the CSRF token for them and the refresh interval."""
        return {
            "version": __version__,
            "namespaces": self.namespaces(),
            "read_only": self.settings.read_only,
            "csrf_token": self.settings.csrf_token,
            "refresh_seconds": self.settings.refresh_seconds,
        }

    def _visible_namespaces(self) -> list[str]:
        with self.pool.connection() as connection, connection.cursor() as cursor:
            return QueueClient(cursor, namespace="default").namespaces()

    def namespaces(self) -> list[str]:
        """The namespaces shown: those given, else every one the role may see."""
        return list(self.settings.namespaces) or self._visible_namespaces()

    def stats_by_namespace(self) -> list[tuple[str, list[QueueStats]]]:
        """Each namespace shown with its queues' stats, for /metrics."""
        namespaces = self.namespaces()
        with self.pool.connection() as connection, connection.cursor() as cursor:
            return [
                (ns, QueueClient(cursor, namespace=ns).stats(cap=STATS_CAP)) for ns in namespaces
            ]

    def overview(self, namespace: str, after: str | None = None) -> dict[str, Any]:
        """A page of the queues (:data:`OVERVIEW_QUEUES`, in name order, after the queue
        ``after``) with their counts and rates, and ``next_after`` (the name the next page
        starts after; None on the last page); the outcome series of the last hour per minute of
        the :data:`CHARTED_QUEUES` busiest queues of the namespace (``charted``, busiest
        first), and the workers alive and lost."""
        with self.client(namespace) as q:
            now = q.clock()
            stats = q.stats(cap=STATS_CAP, after=after, limit=OVERVIEW_QUEUES + 1)
            series = q.outcome_series(since=now - HISTORY)
            workers = q.workers()
        per_queue: dict[str, list[Any]] = {}
        for point in series:
            per_queue.setdefault(point.queue, []).append(
                [
                    point.minute.timestamp(),
                    point.completed,
                    point.dead_lettered,
                    point.retried,
                    point.rescued,
                ]
            )
        outcomes = {name: sum(sum(p[1:]) for p in points) for name, points in per_queue.items()}
        charted = sorted(outcomes, key=lambda name: (-outcomes[name], name))[:CHARTED_QUEUES]
        shown = stats[:OVERVIEW_QUEUES]
        return {
            "now": now.isoformat(),
            "queues": [stats_row(row) for row in shown],
            "after": after,
            "next_after": shown[-1].queue if len(stats) > OVERVIEW_QUEUES else None,
            "charted": charted,
            "series": {name: per_queue[name] for name in charted},
            "workers": {
                "alive": sum(not w.lost for w in workers),
                "lost": sum(w.lost for w in workers),
            },
        }

    def overview_all(self) -> dict[str, Any]:
        """Every namespace shown (up to :data:`ALL_NAMESPACES_SHOWN`), each with its queues'
        counts and its workers alive and lost: the view across namespaces, for an operator
        whose role sees more than one."""
        namespaces = self.namespaces()
        shown = namespaces[:ALL_NAMESPACES_SHOWN]
        rows: list[dict[str, Any]] = []
        with self.pool.connection() as connection, connection.cursor() as cursor:
            for namespace in shown:
                q = QueueClient(cursor, namespace=namespace)
                workers = q.workers()
                stats = q.stats(cap=STATS_CAP, limit=OVERVIEW_QUEUES + 1)
                rows.append(
                    {
                        "namespace": namespace,
                        "queues": [stats_row(row) for row in stats[:OVERVIEW_QUEUES]],
                        "more_queues": len(stats) > OVERVIEW_QUEUES,
                        "workers": {
                            "alive": sum(not w.lost for w in workers),
                            "lost": sum(w.lost for w in workers),
                        },
                    }
                )
        return {"namespaces": rows, "more": len(namespaces) - len(shown)}

    def queue(self, namespace: str, queue: str) -> dict[str, Any]:
        """One queue: its counts, the policy in force, and its first GROUP_KEYS group keys
        with live jobs (``more_groups``: there are more)."""
        with self.client(namespace) as q:
            rows = q.stats(queue, cap=STATS_CAP)
            policy = q.queue_policy(queue)
            groups = q.group_stats(queue, limit=GROUP_KEYS + 1, cap=STATS_CAP)
        return {
            "queue": queue,
            "stats": stats_row(rows[0]) if rows else None,
            "policy": to_jsonable(policy),
            "groups": to_jsonable(groups[:GROUP_KEYS]),
            "more_groups": len(groups) > GROUP_KEYS,
        }

    def jobs(self, namespace: str, queue: str, state: str, cursor: str | None) -> dict[str, Any]:
        """A page of the queue's jobs in one state, in the order the state's index keeps
        them (pull order, claim deadline, or id for dead letters), from ``cursor`` (the
        previous page's ``next_cursor``)."""
        after = _job_cursor(cursor)
        with self.client(namespace) as q:
            rows = q.jobs(queue, state, limit=PAGE_SIZE + 1, after=after)
        more = len(rows) > PAGE_SIZE
        rows = rows[:PAGE_SIZE]
        return {
            "jobs": [job_row(job) for job in rows],
            "next_cursor": JobCursor.after(rows[-1], state).token if more else None,
        }

    def job(self, namespace: str, job_id: int) -> dict[str, Any]:
        """One job, whole: payload, every attempt's error, its claim, its lineage (the dead
        letter it was redriven from, the job its dead letter became), the jobs waiting for it
        (the first 100), its tree (what descends from it through depends_on, the first
        ``TREE_SIZE`` jobs, when anything does), a workflow run's recorded steps, and what
        became of it (``result``: a completed job's kept value, when its queue keeps
        results)."""
        with self.client(namespace) as q:
            now = q.clock()
            job = q.get_job(job_id)
            children = [] if job is None else q.waiting_children(job_id)
            lineage = q.job_lineage(job_id)
            result = q.result(job_id)
            tree = q.job_tree(job_id, limit=TREE_SIZE + 1)
            steps = q.workflow_steps(job_id)
        if job is None and not lineage and result.state == "unknown" and not tree and not steps:
            raise NotFound(
                f"no job {job_id} in namespace {namespace!r} (a completed job leaves unless its "
                "queue keeps results or completed jobs)"
            )
        outcome = dict(to_jsonable(result))
        outcome["value"] = None
        outcome["value_json"] = pretty_value(result.value) if result.state == "completed" else None
        return {
            "now": now.isoformat(),
            "job": None if job is None else job_detail(job),
            # Running past its deadline: no worker holds it, and it waits for a tick_timeouts
            # (any worker of the namespace, or `postkit tick`) to return it to pending.
            "claim_expired": job is not None and job.claim_expired,
            "lineage": to_jsonable(lineage),
            "waiting_children": children,
            "tree": to_jsonable(tree[:TREE_SIZE]) if len(tree) > 1 else [],
            "tree_truncated": len(tree) > TREE_SIZE,
            # A workflow run's steps, each with its result as pretty JSON text (as the job's
            # payload is shown): the page draws them as text, never as markup.
            "steps": [
                {
                    "position": step.position,
                    "name": step.name,
                    "attempt": step.attempt,
                    "recorded_at": step.recorded_at.isoformat(),
                    "result_json": pretty_value(step.result) if step.result_error is None else None,
                    "result_error": step.result_error,
                    # A map's jobs, for the page to link: the ids its step recorded.
                    "jobs": _map_jobs(step.name, step.result),
                }
                for step in steps
            ],
            "result": outcome,
        }

    def dead_letters(
        self,
        namespace: str,
        *,
        queue: str | None,
        error: str | None,
        failed_after: datetime | None,
        failed_before: datetime | None,
        cursor: str | None,
    ) -> dict[str, Any]:
        """A page of dead letters, newest first, filtered; keyset-paged on (failed_at, id).

        No index finds a substring, so a page filtered by error text reads at most
        ``SEARCH_SCAN`` dead letters (``search_dead_letters``): ``searched_all`` is false when
        it stopped there, and ``next_cursor`` searches on. ``total`` counts the matches of
        the other filters, up to ``COUNT_CAP`` (``total_capped``)."""
        after = _dead_letter_position(cursor)
        total: int | None = None
        with self.client(namespace) as q:
            if error:
                found = q.search_dead_letters(
                    error,
                    queue,
                    limit=PAGE_SIZE,
                    failed_after=failed_after,
                    failed_before=failed_before,
                    after=after,
                    scan_limit=SEARCH_SCAN,
                )
                rows, last, searched_all = found.letters, found.next_after, not found.cut
            else:
                rows = q.dead_letters(
                    queue,
                    limit=PAGE_SIZE + 1,
                    failed_after=failed_after,
                    failed_before=failed_before,
                    after=after,
                )
                last = rows[PAGE_SIZE - 1] if len(rows) > PAGE_SIZE else None
                rows, searched_all = rows[:PAGE_SIZE], True
                total = q.count_dead_letters(
                    queue, failed_after=failed_after, failed_before=failed_before, cap=COUNT_CAP
                )
        return {
            "dead_letters": [dead_letter_row(row) for row in rows],
            "next_cursor": None if last is None else f"{last.failed_at.isoformat()}|{last.job_id}",
            "searched_all": searched_all,
            "total": total,
            "total_capped": total is not None and total >= COUNT_CAP,
        }

    def schedules(self, namespace: str, cursor: str | None) -> dict[str, Any]:
        """A page of the schedules, by name, after ``cursor`` (the previous page's
        ``next_cursor``: the last name it showed), each with what became of its last job."""
        with self.client(namespace) as q:
            now = q.clock()
            rows = q.schedules(after=cursor, limit=PAGE_SIZE + 1)
            runs = {run.name: run for run in q.schedule_runs(after=cursor, limit=PAGE_SIZE)}
        more = len(rows) > PAGE_SIZE
        rows = rows[:PAGE_SIZE]
        return {
            "now": now.isoformat(),
            "schedules": [
                {
                    **to_jsonable(row),
                    "payload": None,
                    "payload_preview": preview(row),
                    "last_job_state": getattr(runs.get(row.name), "last_job_state", None),
                }
                for row in rows
            ],
            "next_cursor": rows[-1].name if more else None,
        }

    def workers(self, namespace: str, cursor: str | None) -> dict[str, Any]:
        """A page of the registry, oldest start first, after ``cursor`` (the previous page's
        ``next_cursor``), each worker with the jobs it runs now. The registry is read whole:
        it holds the workers that ran in the last day (prune_workers), not a backlog."""
        with self.client(namespace) as q:
            now = q.clock()
            rows = q.workers()
            running = q.running_jobs()
        start = 0
        if cursor:
            start = next((i + 1 for i, row in enumerate(rows) if row.worker_id == cursor), 0)
        page = rows[start : start + PAGE_SIZE]
        by_worker: dict[str, list[Any]] = {}
        for job in running:
            by_worker.setdefault(job.worker_id or "", []).append(to_jsonable(job))
        return {
            "now": now.isoformat(),
            "workers": [
                {**to_jsonable(row), "running": by_worker.get(row.worker_id, [])} for row in page
            ],
            "total": len(rows),
            "next_cursor": page[-1].worker_id if start + PAGE_SIZE < len(rows) else None,
        }

    # ---------------------------------------------------------------------------------------
    # Actions
    # ---------------------------------------------------------------------------------------

    def set_limits(self, namespace: str, queue: str, limits: dict[str, Any]) -> dict[str, Any]:
        """Set the flow limits named in ``limits`` (None: no limit) and keep the others, as
        ``configure_queue`` does; returns the queue's policy now in force."""
        with self.client(namespace) as q:
            policy = q.configure_queue(queue, **limits) if limits else q.queue_policy(queue)
        return {"queue": queue, "policy": to_jsonable(policy)}

    def set_paused(self, namespace: str, queue: str, paused: bool) -> dict[str, Any]:
        with self.client(namespace) as q:
            state = q.pause_queue(queue) if paused else q.resume_queue(queue)
        return {"queue": queue, "paused": state}

    def purge_queue(
        self, namespace: str, queue: str, *, created_before: datetime | None, dry_run: bool
    ) -> dict[str, Any]:
        """Delete the queue's pending and scheduled jobs created before ``created_before``.

        A dry run reads the cutoff (the queue's clock now) and counts from stats, exact up to
        ``STATS_CAP`` and then "at least" (``capped``): stats' counts stop at the cap, where
        counting a backlog of millions exactly would read every row. The purge sent with the
        returned cutoff never deletes a job pushed after the count."""
        with self.client(namespace) as q:
            cutoff = created_before or q.clock()
            if dry_run:
                rows = q.stats(queue, cap=STATS_CAP)
                count = rows[0].pending + rows[0].scheduled if rows else 0
                capped = bool(rows) and rows[0].counts_capped
            else:
                count, capped = q.purge_queue(queue, created_before=cutoff), False
        return {
            "queue": queue,
            "count": count,
            "capped": capped,
            "dry_run": dry_run,
            "created_before": cutoff.isoformat(),
        }

    def cancel(self, namespace: str, job_id: int) -> dict[str, Any]:
        with self.client(namespace) as q:
            return {"job_id": job_id, "cancelled": q.cancel(job_id)}

    def cancel_tree(self, namespace: str, job_id: int) -> dict[str, Any]:
        """Cancel the live jobs of the job's tree, a page at a time, each page committed."""
        cancelled = 0
        while True:
            with self.client(namespace) as q:
                done = q.cancel_tree(job_id)
            if not done:
                return {"job_id": job_id, "cancelled": cancelled}
            cancelled += done

    def redrive(
        self,
        namespace: str,
        *,
        job_ids: Sequence[int] | None,
        queue: str | None,
        error: str | None,
        failed_after: datetime | None,
        failed_before: datetime | None,
        dry_run: bool,
    ) -> dict[str, Any]:
        """Redrive dead letters as new jobs: the selected ones, or those the filters match, at
        most ``ACTION_LIMIT`` per call (oldest id first). A dry run counts them; for the
        filters it counts up to ``COUNT_CAP`` with ``count_dead_letters`` (an index range
        scan) instead of listing them. An error-text filter needs a selection: matching text
        reads every dead letter, so the page acts on the matches it shows."""
        _require_selection(job_ids, error, "redrive")
        with self.client(namespace) as q:
            if dry_run and job_ids is None:
                count = q.count_dead_letters(
                    queue, failed_after=failed_after, failed_before=failed_before, cap=COUNT_CAP
                )
                return {"count": count, "capped": count >= COUNT_CAP, "dry_run": True}
            rows = q.redrive(
                job_ids,
                queue=queue,
                failed_after=failed_after,
                failed_before=failed_before,
                dry_run=dry_run,
                limit=ACTION_LIMIT,
            )
        return {
            "count": len(rows),
            "capped": False,
            "dry_run": dry_run,
            "redriven": to_jsonable(rows[:PAGE_SIZE]),
        }

    def purge_dead_letters(
        self,
        namespace: str,
        *,
        job_ids: Sequence[int] | None,
        queue: str | None,
        error: str | None,
        failed_after: datetime | None,
        failed_before: datetime | None,
        dry_run: bool,
    ) -> dict[str, Any]:
        """Delete dead letters, retried or not: the selected ones, or every one the filters
        match, that failed before ``failed_before``, else before now by the queue's clock. A
        dry run counts them, the filters' up to ``COUNT_CAP`` and a selection's exactly (by
        purging it and rolling that back: ids may be gone, too new, or of another namespace),
        and returns its cutoff as ``failed_before``: a purge sent with it never deletes a dead
        letter that arrived after the count. An error-text filter needs a selection, as for
        :meth:`redrive`."""
        _require_selection(job_ids, error, "delete")
        with self.client(namespace) as q:
            cutoff = failed_before or q.clock()
            if not dry_run:
                count = q.purge_dead_letters(
                    failed_before=cutoff, job_ids=job_ids, queue=queue, failed_after=failed_after
                )
            elif job_ids is not None:
                with q.cursor.connection.transaction(force_rollback=True):
                    count = q.purge_dead_letters(
                        failed_before=cutoff,
                        job_ids=job_ids,
                        queue=queue,
                        failed_after=failed_after,
                    )
            else:
                count = q.count_dead_letters(
                    queue,
                    failed_after=failed_after,
                    failed_before=cutoff,
                    include_redriven=True,
                    cap=COUNT_CAP,
                )
        return {
            "count": count,
            "capped": dry_run and job_ids is None and count >= COUNT_CAP,
            "dry_run": dry_run,
            "failed_before": cutoff.isoformat(),
        }

    def set_schedule_paused(self, namespace: str, name: str, paused: bool) -> dict[str, Any]:
        with self.client(namespace) as q:
            found = q.pause_schedule(name) if paused else q.resume_schedule(name)
        if not found:
            raise NotFound(f"no schedule {name!r} in namespace {namespace!r}")
        return {"name": name, "paused": paused}


def _require_selection(job_ids: Sequence[int] | None, error: str | None, verb: str) -> None:
    if job_ids is None and error:
        raise BadRequest(
            f"select the dead letters to {verb}: with a text filter an action takes the rows "
            "it shows, never every match (finding text reads every dead letter)"
        )


def _job_cursor(cursor: str | None) -> JobCursor | None:
    if not cursor:
        return None
    try:
        return JobCursor.parse(cursor)
    except PostkitError as exc:
        raise BadRequest(f"not a job page cursor: {exc}") from None


def _dead_letter_position(cursor: str | None) -> _DeadLetterPosition | None:
    if not cursor:
        return None
    try:
        failed_at, job_id = cursor.rsplit("|", 1)
        position = _DeadLetterPosition(datetime.fromisoformat(failed_at), int(job_id))
    except ValueError:
        position = None
    if position is None or not -(2**63) <= position.job_id < 2**63:  # a bigint
        raise BadRequest(f"not a dead-letter page cursor: {cursor!r}")
    return position


class BadRequest(ValueError):
    """A request the API cannot read (a bad cursor, a bad time, a bad id)."""


def _map_jobs(name: str, result: Any) -> list[int]:
    """The job ids a workflow's map step recorded (``{"queue": ..., "jobs": [...]}``); none for
    any other step, or a result of another shape (the SQL accepts any JSON)."""
    if name != "map" or not isinstance(result, dict) or not isinstance(result.get("jobs"), list):
        return []
    return [job for job in result["jobs"] if isinstance(job, int) and not isinstance(job, bool)]

"""Jobs that wait for jobs, progress and a cancel, in one script: a fan-out of word counts, a
fan-in that sums them, and a long export that reports its progress until it is cancelled.

The database is the one ``POSTKIT_DSN`` or ``DATABASE_URL`` names, else Postkit's embedded
PostgreSQL (as for the ``postkit`` command). The script runs its own worker on a thread and
stops it once the story is told.
"""

from __future__ import annotations

import threading
import time

import psycopg

from postkit import tasks
from postkit.embedded import resolve_dsn
from postkit.queue import QueueClient, install
from postkit.worker import is_cancelled, report_progress

NAMESPACE = "pipeline-example"
DOCUMENTS = ["the quick brown fox", "jumps over", "the lazy dog"]

app = tasks.App(namespace=NAMESPACE)
export_stopped = threading.Event()


@app.task(queue="word_counts", retain_results=3600)  # a fan-in reads its parents' results
def count_words(text: str) -> int:
    return len(text.split())


@app.task(queue="totals", retain_results=3600)
def total_words() -> int:
    counts = tasks.parent_results()  # {parent job id: what it returned}
    print(f"total: {sum(counts.values())} words in {len(counts)} documents", flush=True)
    return sum(counts.values())


@app.task(queue="exports")
def export(pages: int) -> None:
    for page in range(1, pages + 1):
        if is_cancelled():  # an operator cancelled it: stop early
            print(f"export stopped after {page - 1} of {pages} pages", flush=True)
            export_stopped.set()
            return
        report_progress(page / pages, note=f"page {page} of {pages}")
        time.sleep(0.02)


def main() -> None:
    dsn = resolve_dsn()
    with psycopg.connect(dsn) as connection:
        install(connection)
        with connection.cursor() as cursor:
            app.apply_policies(cursor)  # the queues keep results, as the tasks declare
            counts = count_words.push_many(cursor, [{"text": text} for text in DOCUMENTS])
            total = total_words.options(depends_on=[c for c in counts if c is not None])
            total_id = total.push(cursor)  # waits until every count has completed
            export_id = export.push(cursor, pages=100_000)
        connection.commit()

    worker = app.worker(dsn, visibility_timeout=1.0)  # a heartbeat every third of a second
    running = threading.Thread(target=worker.run)
    running.start()
    try:
        with psycopg.connect(dsn, autocommit=True) as connection:
            queue = QueueClient(connection.cursor(), namespace=NAMESPACE)
            assert total_id is not None and export_id is not None
            print(f"the fan-in returned {queue.wait_for_result(total_id, timeout=30).value}")
            while (job := queue.get_job(export_id)) is None or job.progress is None:
                time.sleep(0.05)
            print(f"export at {job.progress:.1%} ({job.progress_note}): cancelling it")
            queue.cancel(export_id)
            export_stopped.wait(30)
            print(f"export {export_id}: {queue.result(export_id).state}", flush=True)
    finally:
        worker.stop()
        running.join()


if __name__ == "__main__":
    main()

"""postkit.contrib.django on the test project (tests/django_project), against a real
PostgreSQL: migrate installs the schema, queue() pushes in the ORM's transaction, a
transactional handler's ORM writes commit with its ack, and manage.py postkit_worker runs a
worker on Django's database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from postkit.queue import Job, QueueClient, installed_version, latest_version
from postkit.worker import Handlers, Worker
from tests.signals import wait_until
from tests.threads import QUIET, worker_threads

ROOT = Path(__file__).resolve().parents[2]
StartWorker = Callable[[Handlers], Worker]


@pytest.fixture
def django_db(django_dsn: str) -> Iterator[None]:
    """Django set up on the project's database; the receipts are emptied after the test."""
    from django.db import connections

    from tests.django_project.shop.models import Receipt

    yield
    Receipt.objects.all().delete()
    connections.close_all()


@pytest.fixture
def queue_name() -> str:
    """A queue no other test uses (the project has one namespace, "shop")."""
    return f"q-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def observer(django_dsn: str) -> Iterator[QueueClient]:
    """An autocommit client of its own in the project's namespace: it sees what committed."""
    with psycopg.connect(django_dsn, autocommit=True) as connection:
        yield QueueClient(connection.cursor(), namespace="shop")


@pytest.fixture
def start_worker(django_dsn: str) -> Iterator[StartWorker]:
    with worker_threads() as run:
        # A long visibility timeout: no heartbeat touches a claim while a test rescues it.
        yield lambda handlers: run(
            Worker(django_dsn, handlers, namespace="shop", visibility_timeout=600, **QUIET)
        )


def pending(observer: QueueClient, queue: str) -> list[Any]:
    observer.cursor.execute(
        "SELECT payload FROM postkit_queue.jobs WHERE namespace = %s AND queue = %s ORDER BY id",
        (observer.namespace, queue),
    )
    return [row[0] for row in observer.cursor.fetchall()]


def receipts() -> list[int]:
    from tests.django_project.shop.models import Receipt

    return list(Receipt.objects.order_by("job_id").values_list("job_id", flat=True))


# ---------------------------------------------------------------------------------------------
# The schema.
# ---------------------------------------------------------------------------------------------


def test_migrate_installs_the_queue_schema(django_db: None, observer: QueueClient) -> None:
    assert installed_version(observer.cursor) == latest_version()


def test_migrate_again_reinstalls_a_schema_behind_the_package(
    django_db: None, observer: QueueClient
) -> None:
    from django.core.management import call_command

    # The migration is recorded as applied; only the post_migrate upgrade can bring it back.
    observer.cursor.execute("DROP SCHEMA postkit_queue CASCADE")
    assert installed_version(observer.cursor) == 0
    call_command("migrate", verbosity=0)
    assert installed_version(observer.cursor) == latest_version()


def test_postkit_install_reports_a_current_schema(django_db: None) -> None:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("postkit_install", stdout=out)
    assert out.getvalue() == f"postkit schema: version {latest_version()}, current\n"


def test_a_postkit_setting_it_does_not_know_is_refused(django_db: None) -> None:
    from django.core.exceptions import ImproperlyConfigured
    from django.test import override_settings

    from postkit.contrib import django as postkit_django

    with (
        override_settings(POSTKIT={"NAMESPACE": "shop", "DATABSE": "default"}),
        pytest.raises(ImproperlyConfigured, match="unknown keys 'DATABSE'"),
    ):
        postkit_django.queue()


# ---------------------------------------------------------------------------------------------
# queue(): pushes in the ORM's transaction.
# ---------------------------------------------------------------------------------------------


def test_a_push_in_atomic_commits_with_the_orms_writes(
    django_db: None, observer: QueueClient, queue_name: str
) -> None:
    from django.db import transaction

    from postkit.contrib import django as postkit_django
    from tests.django_project.shop.models import Receipt

    with transaction.atomic():
        job_id = postkit_django.queue().push(queue_name, {"order": 1})
        assert job_id is not None
        Receipt.objects.create(job_id=job_id)
        assert pending(observer, queue_name) == [], "visible before the commit"
    assert pending(observer, queue_name) == [{"order": 1}]
    assert receipts() == [job_id]


def test_a_push_in_atomic_rolls_back_with_the_orms_writes(
    django_db: None, observer: QueueClient, queue_name: str
) -> None:
    from django.db import transaction

    from postkit.contrib import django as postkit_django
    from tests.django_project.shop.models import Receipt

    with pytest.raises(RuntimeError), transaction.atomic():
        job_id = postkit_django.queue().push(queue_name, {"order": 1})
        assert job_id is not None
        Receipt.objects.create(job_id=job_id)
        raise RuntimeError("the request fails")
    assert pending(observer, queue_name) == []
    assert receipts() == []


def test_a_savepoint_that_rolls_back_drops_its_own_push_only(
    django_db: None, observer: QueueClient, queue_name: str
) -> None:
    from django.db import transaction

    from postkit.contrib import django as postkit_django

    with transaction.atomic():
        postkit_django.queue().push(queue_name, {"kept": True})
        with pytest.raises(RuntimeError), transaction.atomic():
            postkit_django.queue().push(queue_name, {"kept": False})
            raise RuntimeError("the inner block fails")
    assert pending(observer, queue_name) == [{"kept": True}]


# ---------------------------------------------------------------------------------------------
# Transactional handlers on Django's connection.
# ---------------------------------------------------------------------------------------------


def test_a_handlers_orm_writes_commit_with_its_ack(
    django_db: None, observer: QueueClient, queue_name: str, start_worker: StartWorker
) -> None:
    from postkit.contrib import django as postkit_django
    from tests.django_project.shop.models import Receipt

    handlers = Handlers()

    @handlers.register(queue_name, transactional=True, transaction=postkit_django.transaction)
    def write(job: Job, cursor: Any) -> None:
        Receipt.objects.create(job_id=job.id)

    worker = start_worker(handlers)
    job_id = observer.push(queue_name, {})
    wait_until(lambda: worker.stats.completed == 1, "the job to be acked")
    assert observer.get_job(job_id) is None
    assert receipts() == [job_id]


def test_a_stale_claim_rolls_back_the_handlers_orm_writes(
    django_db: None,
    observer: QueueClient,
    queue_name: str,
    start_worker: StartWorker,
    shift_clock: Callable[[QueueClient, float], None],
) -> None:
    from postkit.contrib import django as postkit_django
    from tests.django_project.shop.models import Receipt

    rescued: list[int] = []
    taken_over: list[bool] = []
    handlers = Handlers()

    @handlers.register(queue_name, transactional=True, transaction=postkit_django.transaction)
    def write_while_rescued(job: Job, cursor: Any) -> None:
        Receipt.objects.create(job_id=job.id)
        # Another process decides this claim expired; a second worker takes the job and
        # completes it before this handler returns.
        shift_clock(observer, 3600)
        rescued.append(observer.tick_timeouts())
        taken = observer.pull(queue_name, worker_id="second")
        taken_over.append(taken is not None and observer.ack(taken))

    worker = start_worker(handlers)
    job_id = observer.push(queue_name, {})
    wait_until(lambda: worker.stats.stale == 1, "the first worker's stale ack")
    assert (rescued, taken_over) == ([1], [True])
    assert worker.stats.completed == 0
    assert observer.get_job(job_id) is None, "the second worker completed it"
    assert receipts() == [], "the first worker's row rolled back with its stale ack"


def test_a_failing_handlers_orm_writes_roll_back_and_the_job_is_retried(
    django_db: None, observer: QueueClient, queue_name: str, start_worker: StartWorker
) -> None:
    from postkit.contrib import django as postkit_django
    from tests.django_project.shop.models import Receipt

    handlers = Handlers()

    @handlers.register(queue_name, transactional=True, transaction=postkit_django.transaction)
    def write_then_fail(job: Job, cursor: Any) -> None:
        Receipt.objects.create(job_id=job.id)
        raise RuntimeError("after the write")

    worker = start_worker(handlers)
    job_id = observer.push(queue_name, {}, backoff_base=60)
    wait_until(lambda: worker.stats.retried == 1, "the job to be nacked")
    job = observer.get_job(job_id)
    assert job is not None and job.state == "pending"
    assert receipts() == []


# ---------------------------------------------------------------------------------------------
# manage.py postkit_worker.
# ---------------------------------------------------------------------------------------------


def test_postkit_worker_refuses_a_dsn_of_its_own(django_db: None) -> None:
    from django.core.management import call_command
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="takes no --dsn"):
        call_command("postkit_worker", "tests.django_project.shop.tasks", "--dsn=x")


def test_postkit_worker_refuses_several_processes_from_the_command_line(
    django_db: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from django.core.management import ManagementUtility

    command = ["manage.py", "postkit_worker", "tests.django_project.shop.tasks"]
    with pytest.raises(SystemExit) as exited:
        ManagementUtility([*command, "--processes", "2"]).execute()
    assert exited.value.code == 1
    assert "postkit_worker takes no --processes" in capsys.readouterr().err


def test_postkit_worker_help_lists_only_the_options_it_takes(
    django_db: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from django.core.management import ManagementUtility

    with pytest.raises(SystemExit) as exited:
        ManagementUtility(["manage.py", "postkit_worker", "--help"]).execute()
    shown = capsys.readouterr().out

    assert exited.value.code == 0
    assert "Usage: manage.py postkit_worker" in shown and "--queue" in shown
    options = {
        word.rstrip(",")
        for line in shown.splitlines()
        if line.startswith("  -")
        for word in line.split()[:2]
    }
    assert "--queue" in options
    assert "--dsn" not in options and "--processes" not in options


def test_postkit_worker_runs_the_handlers_on_djangos_database(
    django_db: None, django_dsn: str, observer: QueueClient
) -> None:
    from postkit.contrib import django as postkit_django

    job_id = postkit_django.queue().push("receipts", {"note": "from manage.py"})
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        "POSTKIT_DJANGO_DSN": django_dsn,
    }
    env.pop("POSTKIT_DSN", None)
    worker = subprocess.Popen(
        [
            *(sys.executable, str(ROOT / "tests" / "django_project" / "manage.py")),
            *("postkit_worker", "tests.django_project.shop.tasks", "--queue", "receipts"),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(lambda: receipts() == [job_id], "the worker to write the receipt")
    finally:
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0, output
    assert observer.get_job(job_id) is None
    from tests.django_project.shop.models import Receipt

    assert Receipt.objects.get(job_id=job_id).note == "from manage.py"

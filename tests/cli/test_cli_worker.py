"""`postkit worker`: real worker processes against the test server.

Each test writes a handler module into its tmp_path and runs
``python -m postkit.cli worker tasks`` there. Waits are bounded polls on the database or on
files the processes write; nothing sleeps and hopes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

import psycopg
import pytest
from click.testing import CliRunner

from postkit.cli import main
from postkit.cli.output import mask_password
from postkit.cli.worker import child_arguments
from postkit.queue import QueueClient
from tests.scrape import free_ports, try_scrape, value
from tests.signals import wait_until

pytestmark = pytest.mark.slow

T = TypeVar("T")

TIMEOUT = 15.0
"""Seconds any single wait may take before the test fails."""

RUNS_TABLE = "postkit_test_cli_worker_runs"

TASKS = f"""
import os
import time
from pathlib import Path

from postkit.errors import PermanentError
from postkit.worker import Handlers

# Every process that imports this module says so: the tests see restarts here.
with open(Path(__file__).with_name("pids.txt"), "a") as pids:
    pids.write(f"{{os.getpid()}}\\n")

handlers = Handlers()


@handlers.register("emails", transactional=True)
def send_email(job, cursor):
    time.sleep(job.payload.get("sleep", 0))  # slow work on purpose, when the test asks
    cursor.execute(
        "INSERT INTO {RUNS_TABLE} (namespace, job_id, worker_id, pid) VALUES (%s, %s, %s, %s)",
        (job.namespace, job.id, job.worker_id, os.getpid()),
    )


@handlers.register("reports")
def build_report(job):
    if job.payload.get("broken"):
        raise PermanentError("this report cannot be built")
"""


# -------------------------------------------------------------------------------------------
# Helpers
# -------------------------------------------------------------------------------------------


class WorkerProcess:
    """A `postkit worker` process, its output in a file."""

    def __init__(
        self, args: list[str], cwd: Path, log_path: Path, env: dict[str, str] | None = None
    ) -> None:
        self.log_path = log_path
        self._log: IO[str] = log_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "postkit.cli", "worker", *args],
            cwd=cwd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log_path.read_text()

    def terminate(self) -> int:
        """SIGTERM, then the exit code (bounded wait)."""
        self.process.send_signal(signal.SIGTERM)
        return self.wait()

    def wait(self) -> int:
        try:
            return self.process.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker did not exit:\n{self.output()}") from None

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._log.close()


@pytest.fixture
def runs(
    connect: Callable[..., psycopg.Connection[Any]], namespace: str
) -> Callable[[], list[tuple[int, str, int]]]:
    """The jobs the `emails` handler ran in this test's namespace: (job_id, worker_id, pid)."""
    connection = connect(autocommit=True)
    connection.execute(
        f"CREATE TABLE IF NOT EXISTS {RUNS_TABLE} "
        "(namespace text, job_id bigint, worker_id text, pid integer)"
    )

    def _runs() -> list[tuple[int, str, int]]:
        return connection.execute(
            f"SELECT job_id, worker_id, pid FROM {RUNS_TABLE} WHERE namespace = %s",
            (namespace,),
        ).fetchall()

    return _runs


@pytest.fixture
def pending(connect: Callable[..., psycopg.Connection[Any]], namespace: str) -> Callable[[], int]:
    """How many jobs of this test's namespace are still in postkit_queue.jobs."""
    connection = connect(autocommit=True)

    def _pending() -> int:
        row = connection.execute(
            "SELECT count(*) FROM postkit_queue.jobs WHERE namespace = %s", (namespace,)
        ).fetchone()
        assert row is not None
        return int(row[0])

    return _pending


@pytest.fixture
def push(make_client: Callable[[], QueueClient]) -> Callable[..., list[int]]:
    """Push ``count`` jobs with ``payload`` to ``queue`` in one committed transaction."""
    client = make_client()

    def _push(queue: str, count: int, payload: dict[str, Any] | None = None) -> list[int]:
        ids = [client.push(queue, payload or {}) for _ in range(count)]
        client.cursor.connection.commit()
        return [job_id for job_id in ids if job_id is not None]

    return _push


@pytest.fixture
def tasks_dir(tmp_path: Path) -> Path:
    (tmp_path / "tasks.py").write_text(TASKS)
    return tmp_path


def import_pids(directory: Path) -> list[int]:
    """The pids of every process that imported tasks.py, in order."""
    path = directory / "pids.txt"
    if not path.exists():
        return []
    return [int(line) for line in path.read_text().splitlines(keepends=True) if line.endswith("\n")]


def is_our_worker(pid: int, namespace: str) -> bool:
    """True if ``pid`` is alive and a worker of this test (never touch anyone else's pid)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"postkit.cli" in command and namespace.encode() in command


@pytest.fixture
def start_worker(
    tasks_dir: Path, dsn: str, namespace: str
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start `postkit worker tasks` in tasks_dir on this test's namespace; everything it
    started is gone after the test, even when the test fails."""
    started: list[WorkerProcess] = []

    def _start(*args: str) -> WorkerProcess:
        worker = WorkerProcess(
            ["tasks", "--dsn", dsn, "--namespace", namespace, "--poll-interval", "0.5", *args],
            cwd=tasks_dir,
            log_path=tasks_dir / f"worker-{len(started)}.log",
        )
        started.append(worker)
        return worker

    yield _start
    for worker in started:
        worker.close()
    for pid in import_pids(tasks_dir):
        if is_our_worker(pid, namespace):
            os.kill(pid, signal.SIGKILL)


def run_cli(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "postkit.cli", "worker", *args],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def reported_attempts(output: str) -> int:
    """The settled attempts counted by the throughput lines of ``output``."""
    return sum(
        int(count.replace(",", ""))
        for count in re.findall(r"([\d,]+) attempts? settled in ", output)
    )


# -------------------------------------------------------------------------------------------
# Help and errors
# -------------------------------------------------------------------------------------------


def test_help_teaches_with_an_example_handler_module() -> None:
    result = CliRunner().invoke(main, ["worker", "--help"])

    assert result.exit_code == 0
    assert "handlers = Handlers()" in result.output
    assert '@handlers.register("send_email")' in result.output
    assert "postkit worker tasks" in result.output
    for option in ("--queue", "--concurrency", "--processes", "--log-format", "--verbose"):
        assert option in result.output


@pytest.mark.parametrize(
    ("worker_id", "processes", "message"),
    [
        (
            "w" * 127,
            "2",
            f"with --processes 2 the processes claim as ID-0 to ID-1, and '{'w' * 127}-1' is "
            "129 characters long; the limit is 128",
        ),
        ("w" * 129, "1", "the worker id is 129 characters long; the limit is 128"),
    ],
    ids=["valid-alone-too-long-with-processes", "too-long-alone"],
)
def test_a_worker_id_some_process_could_not_claim_under_is_refused_before_any_starts(
    tasks_dir: Path, dsn: str, worker_id: str, processes: str, message: str
) -> None:
    result = run_cli(
        tasks_dir, "tasks", "--worker-id", worker_id, "--processes", processes, "--dsn", dsn
    )

    assert result.returncode == 2, result.stderr
    assert message in " ".join(result.stderr.split())
    assert len(import_pids(tasks_dir)) == 1  # the command's own import: no process started


@pytest.mark.parametrize(
    ("module_text", "spec", "message"),
    [
        ("x = 1\n", "tasks", "tasks defines no Handlers or App; create one with `handlers = "),
        (
            "from postkit.worker import Handlers\na = Handlers()\nb = Handlers()\n",
            "tasks",
            "tasks defines several Handlers (a, b); name one, e.g. tasks:a",
        ),
        ("x = 1\n", "tasks:handlers", "tasks has no attribute 'handlers'"),
        (
            "handlers = 1\n",
            "tasks:handlers",
            "tasks:handlers is not a Handlers object (from postkit.worker import "
            "Handlers) or a tasks App (from postkit.tasks import App) but of type int",
        ),
        (
            "from postkit.tasks import App\nfrom postkit.worker import Handlers\n"
            "app = App()\nhandlers = Handlers()\n",
            "tasks",
            "tasks defines several Handlers and Apps (app, handlers); name one, e.g. tasks:app",
        ),
        (
            "from postkit.tasks import App\napp = App()\n",
            "tasks",
            "tasks:app registers no handlers; add one with @app.task(queue='queue_name')",
        ),
        ("x = 1\n", "nosuch.tasks", "cannot import nosuch.tasks: no module named 'nosuch'"),
    ],
    ids=[
        "no-handlers",
        "several-handlers",
        "missing-attribute",
        "not-handlers",
        "handlers-and-app",
        "empty-app",
        "missing-module",
    ],
)
def test_a_module_without_one_handlers_is_a_one_line_error(
    tmp_path: Path, dsn: str, module_text: str, spec: str, message: str
) -> None:
    (tmp_path / "tasks.py").write_text(module_text)

    result = run_cli(tmp_path, spec, "--dsn", dsn)

    assert result.returncode == 1
    assert result.stderr.startswith(f"Error: {message}")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"tasks.py": "import os\nimport requestz_not_installed\n"},
            "Error: cannot import tasks: ModuleNotFoundError: No module named "
            "'requestz_not_installed' (tasks.py, line 2); is it installed for this Python (",
        ),
        (
            {"tasks.py": "x = 1\ndef send(job:\n    pass\n"},
            "Error: cannot import tasks: SyntaxError: ",
        ),
        (
            {
                "tasks.py": "import settings\n",
                "settings.py": "def load():\n    raise RuntimeError('SMTP_HOST is not set')\n"
                "load()\n",
            },
            "Error: cannot import tasks: RuntimeError: SMTP_HOST is not set (tasks.py, line 1, "
            "raised in settings.py, line 2)",
        ),
    ],
    ids=["missing-dependency", "syntax-error", "error-while-importing"],
)
def test_a_module_whose_import_fails_is_a_short_error_naming_the_file_line_and_cause(
    tmp_path: Path, dsn: str, files: dict[str, str], message: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)

    result = run_cli(tmp_path, "tasks", "--dsn", dsn)

    assert result.returncode == 1
    assert result.stderr.startswith(message), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_a_syntax_error_names_the_line_and_shows_it(tmp_path: Path, dsn: str) -> None:
    (tmp_path / "tasks.py").write_text("x = 1\ndef send(job:\n    pass\n")

    result = run_cli(tmp_path, "tasks", "--dsn", dsn)

    assert result.stderr.rstrip().endswith("(tasks.py, line 2: def send(job:)"), result.stderr


def test_an_unknown_queue_is_a_clear_error(tasks_dir: Path, dsn: str) -> None:
    result = run_cli(tasks_dir, "tasks", "--queue", "emails", "--queue", "sms", "--dsn", dsn)

    assert result.returncode == 2
    assert (
        "Invalid value for '--queue': tasks:handlers has no handler for 'sms'; "
        "it registers 'emails', 'reports'" in result.stderr
    )
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("weight", "message"),
    [
        ("emails", "'emails' is not QUEUE=N (a queue and its weight, e.g. reports=3)"),
        ("emails=0", "'emails''s weight must be from 1 to 1000, got 0"),
        ("sms=2", "Invalid value for '--weight': no such queue served: ['sms']"),
    ],
)
def test_a_weight_that_is_not_a_served_queue_and_a_weight_is_a_clear_error(
    tasks_dir: Path, dsn: str, weight: str, message: str
) -> None:
    result = run_cli(tasks_dir, "tasks", "--weight", weight, "--dsn", dsn)

    assert result.returncode == 2
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_database_without_the_queue_schema_is_a_one_line_error(
    tasks_dir: Path, fresh_database: str
) -> None:
    result = run_cli(tasks_dir, "tasks", "--dsn", fresh_database)

    assert result.returncode == 1
    assert result.stderr.startswith("Error: the queue schema is not installed")
    assert "run `postkit install` first" in result.stderr
    assert "Traceback" not in result.stderr


# -------------------------------------------------------------------------------------------
# One process
# -------------------------------------------------------------------------------------------


def test_the_worker_processes_pushed_jobs_then_exits_0_on_sigterm(
    start_worker: Callable[..., WorkerProcess],
    push: Callable[..., list[int]],
    pending: Callable[[], int],
    runs: Callable[[], list[tuple[int, str, int]]],
) -> None:
    worker = start_worker("--report-interval", "0.2")
    emails = push("emails", 20)
    push("reports", 4)
    push("reports", 1, {"broken": True})

    wait_until(lambda: pending() == 0, "the worker to settle every job")
    code = worker.terminate()

    output = worker.output()
    assert code == 0, output
    assert sorted(job_id for job_id, _, pid in runs() if pid == worker.pid) == sorted(emails)
    # Quiet by default: no line per job, but throughput lines that add up to every job.
    assert "completed job" not in output and "claimed job" not in output
    assert reported_attempts(output) == 25, output
    assert re.search(
        r"^\[postkit\] [\d,]+ attempts? settled in [\d.]+s \([\d.,]+/s\): [\d,]+ completed, ",
        output,
        re.M,
    )
    assert sum(int(count) for count in re.findall(r"(\d+) dead-lettered", output)) == 1


def test_the_throughput_line_counts_settled_attempts_in_the_singular_and_the_plural(
    start_worker: Callable[..., WorkerProcess],
    push: Callable[..., list[int]],
    pending: Callable[[], int],
) -> None:
    one = start_worker("--report-interval", "600")
    push("reports", 1)
    wait_until(lambda: pending() == 0, "the first worker to settle its job")
    assert one.terminate() == 0
    two = start_worker("--report-interval", "600")
    push("reports", 1)
    push("reports", 1, {"broken": True})
    wait_until(lambda: pending() == 0, "the second worker to settle its jobs")
    assert two.terminate() == 0

    # The line at exit reports what the interval's lines had not: here, everything.
    (first,) = [line for line in one.output().splitlines() if " settled in " in line]
    (second,) = [line for line in two.output().splitlines() if " settled in " in line]
    assert re.fullmatch(
        r"\[postkit\] 1 attempt settled in [\d.]+s \([\d.,]+/s\): 1 completed, 0 retried, "
        r"0 dead-lettered",
        first,
    ), first
    assert re.fullmatch(
        r"\[postkit\] 2 attempts settled in [\d.]+s \([\d.,]+/s\): 1 completed, 0 retried, "
        r"1 dead-lettered",
        second,
    ), second


def test_without_verbose_the_worker_says_in_one_line_what_it_works_and_where(
    start_worker: Callable[..., WorkerProcess], namespace: str, dsn: str
) -> None:
    worker = start_worker("--concurrency", "3")

    line = wait_until(
        lambda: next((ln for ln in worker.output().splitlines() if "started" in ln), None),
        "the start line",
    )
    assert worker.terminate() == 0

    assert line == (
        f"[postkit] worker started: namespace {namespace!r}, queues emails, reports, "
        f"concurrency 3, 1 process, database {mask_password(dsn)}"
    )


def test_verbose_logs_a_line_per_job(
    start_worker: Callable[..., WorkerProcess],
    push: Callable[..., list[int]],
    pending: Callable[[], int],
) -> None:
    worker = start_worker("-v", "--queue", "reports")
    ids = push("reports", 5)

    wait_until(lambda: pending() == 0, "the worker to settle every job")
    assert worker.terminate() == 0

    output = worker.output()
    assert sorted(int(i) for i in re.findall(r"completed job (\d+) in", output)) == sorted(ids)
    assert sorted(int(i) for i in re.findall(r"claimed job (\d+) \(reports", output)) == sorted(ids)


def test_json_log_format_writes_one_object_per_line_with_the_event_fields(
    start_worker: Callable[..., WorkerProcess],
    push: Callable[..., list[int]],
    pending: Callable[[], int],
) -> None:
    worker = start_worker("-v", "--log-format", "json")
    good = push("reports", 2)
    (broken,) = push("reports", 1, {"broken": True})

    wait_until(lambda: pending() == 0, "the worker to settle every job")
    assert worker.terminate() == 0

    lines = [json.loads(line) for line in worker.output().splitlines()]
    assert all({"ts", "level", "logger", "message"} <= line.keys() for line in lines)
    acked = [line for line in lines if line.get("event") == "completed"]
    assert sorted(line["job_id"] for line in acked) == sorted(good)
    assert all(line["queue"] == "reports" and line["attempt"] == 1 for line in acked)
    assert all(isinstance(line["duration_ms"], float) for line in acked)
    (dead,) = [line for line in lines if line.get("event") == "dead_lettered"]
    assert dead["job_id"] == broken and "cannot be built" in dead["message"]
    reports = [line for line in lines if line.get("event") == "report"]
    assert sum(line["attempts"] for line in reports) == 3
    assert sum(line["dead_lettered"] for line in reports) == 1


def test_metrics_port_serves_the_workers_prometheus_metrics(
    start_worker: Callable[..., WorkerProcess],
    push: Callable[..., list[int]],
    pending: Callable[[], int],
    namespace: str,
) -> None:
    port = free_ports()
    worker = start_worker("--metrics-port", str(port))
    push("reports", 2)
    push("reports", 1, {"broken": True})
    wait_until(lambda: pending() == 0, "the worker to settle every job")

    endpoint = f"http://127.0.0.1:{port}/metrics"
    samples = wait_until(
        lambda: (
            (found := try_scrape(endpoint))
            and value(found, "postkit_jobs_total", queue="reports", outcome="completed") == 2
            and found
        ),
        "the endpoint to count the two completed jobs",
    )
    labels = {"namespace": namespace, "queue": "reports"}
    assert value(samples, "postkit_jobs_total", outcome="dead_lettered", **labels) == 1
    assert value(samples, "postkit_handler_duration_seconds_count", **labels) == 3
    assert worker.terminate() == 0, worker.output()
    assert f"metrics on {endpoint}" in worker.output()


def test_metrics_port_without_prometheus_client_is_one_line_naming_the_extra(
    tasks_dir: Path, dsn: str
) -> None:
    # An entry of None in sys.modules makes `import prometheus_client` raise ImportError.
    script = (
        "import sys; sys.modules['prometheus_client'] = None; from postkit.cli import main; "
        f"main(['worker', 'tasks', '--metrics-port', '9100', '--dsn', {dsn!r}])"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tasks_dir,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )

    assert result.returncode == 1
    assert result.stderr == (
        "Error: metrics need prometheus_client, which is not installed: "
        "pip install 'postkit-queue[metrics]'\n"
    )


# -------------------------------------------------------------------------------------------
# Several processes under the supervisor
# -------------------------------------------------------------------------------------------


def test_processes_share_the_work_a_killed_one_is_restarted_and_sigterm_stops_all(
    start_worker: Callable[..., WorkerProcess],
    push: Callable[..., list[int]],
    pending: Callable[[], int],
    runs: Callable[[], list[tuple[int, str, int]]],
    tasks_dir: Path,
    namespace: str,
) -> None:
    supervisor = start_worker("--processes", "2", "--concurrency", "1", "--worker-id", "pool")

    def children() -> list[int]:
        return [pid for pid in import_pids(tasks_dir) if pid != supervisor.pid]

    def work_until(condition: Callable[[], bool], what: str) -> None:
        """Push small batches of slow-ish jobs until ``condition`` holds (bounded)."""

        def round_of_work() -> bool:
            if pending() == 0:
                push("emails", 4, {"sleep": 0.05})
            return condition()

        wait_until(round_of_work, what)

    first, second = wait_until(lambda: children() if len(children()) == 2 else [], "2 children")
    work_until(
        lambda: {worker_id for _, worker_id, _ in runs()} == {"pool-0", "pool-1"},
        "both processes to run jobs",
    )
    assert {pid for _, _, pid in runs()} == {first, second}
    wait_until(lambda: pending() == 0, "every job to be settled")  # nothing dies holding a job

    os.kill(first, signal.SIGKILL)
    (restarted,) = wait_until(lambda: children()[2:], "the killed process to be restarted")
    work_until(lambda: restarted in {pid for _, _, pid in runs()}, "the new process to run jobs")
    wait_until(lambda: pending() == 0, "every job to be settled")

    assert supervisor.terminate() == 0, supervisor.output()
    output = supervisor.output()
    assert f"(pid {first}) was killed by SIGKILL; restarting in" in output
    (started,) = [line for line in output.splitlines() if "worker started" in line]
    assert "queues emails, reports, concurrency 1, 2 processes, database " in started
    assert not any(is_our_worker(pid, namespace) for pid in (second, restarted))
    assert re.search(r"^\[postkit\] pool-[01]: [\d,]+ attempts? settled in ", output, re.M)


def test_an_idle_worker_of_four_processes_holds_one_connection_each_and_one_more(
    tasks_dir: Path,
    dsn: str,
    namespace: str,
    make_client: Callable[..., QueueClient],
    connect: Callable[..., psycopg.Connection[Any]],
) -> None:
    """Each process listens on one connection, which also carries its registry heartbeat,
    rescues and schedules; the first holds one more for retention and vacuum; the pools open
    connections for work and close them once unused (docs/operations.md). Sampled for a few
    seconds, so that every maintenance round in between is counted too."""
    application = f"pk-idle-{namespace}"[:63]
    named = psycopg.conninfo.make_conninfo(dsn, application_name=application)
    worker = WorkerProcess(
        ["tasks", "--namespace", namespace, "--processes", "4", "--concurrency", "4"],
        cwd=tasks_dir,
        log_path=tasks_dir / "worker-idle.log",
        env={**os.environ, "POSTKIT_DSN": named},
    )
    client = make_client(autocommit=True)
    monitor = connect(autocommit=True)

    def held() -> int:
        row = monitor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application,)
        ).fetchone()
        return int(row[0]) if row else 0

    try:
        wait_until(lambda: len(client.workers()) == 4, "the four processes to register")
        wait_until(lambda: held() <= 5, "the pools to close their unused connections", 60)
        samples = [held() for _ in range(40) if not time.sleep(0.1)]
        assert max(samples) <= 5, (samples, worker.output())
    finally:
        worker.process.send_signal(signal.SIGTERM)
        worker.wait()
        worker.close()


def test_the_children_get_every_option_given_but_the_ones_the_supervisor_sets_for_each() -> None:
    """Every parameter of `postkit worker`, given a value other than its default, reaches a
    child as given: an option added to the command needs nothing more to reach the children."""
    command = main.commands["worker"]
    per_child = {"processes", "worker_id", "supervised", "no_housekeeping", "dsn", "metrics_port"}
    given = ["tasks:handlers", "-q", "emails", "-q", "reports", "-c", "3", "--prefetch", "0"]
    given += ["--namespace", "shop", "--visibility-timeout", "12.5", "--grace-period", "0"]
    given += ["--cancel-grace", "0.5"]
    given += ["--handler-timeout", "0.25", "--poll-interval", "1e-3", "--pooler", "-v"]
    given += ["--report-interval", "0", "--vacuum-interval", "7", "--log-format", "json"]
    given += ["--metrics-host", "0.0.0.0", "--weight", "emails=3", "--weight", "a=b=2"]
    given += ["--processes", "3", "--worker-id", "pool", "--supervised", "--no-housekeeping"]
    given += ["--dsn", "postgresql://x"]
    given += ["--metrics-port", "9100"]
    given += ["--shared-namespace", "tenant-a=3", "--shared-namespace", "tenant-b"]
    defaults = command.make_context("worker", ["tasks"]).params
    parent = command.make_context("worker", given).params
    assert [name for name, value in parent.items() if value == defaults[name]] == []

    child = command.make_context("worker", child_arguments(command, parent)).params

    assert {name: child[name] for name in parent if name not in per_child} == {
        name: value for name, value in parent.items() if name not in per_child
    }
    assert {name: child[name] for name in per_child} == {name: defaults[name] for name in per_child}


def test_with_processes_each_serves_its_metrics_on_the_port_plus_its_index(
    start_worker: Callable[..., WorkerProcess],
    push: Callable[..., list[int]],
    pending: Callable[[], int],
) -> None:
    port = free_ports(2)
    supervisor = start_worker("--processes", "2", "--metrics-port", str(port))
    endpoints = [f"http://127.0.0.1:{port + index}/metrics" for index in range(2)]
    for endpoint in endpoints:
        wait_until(lambda endpoint=endpoint: try_scrape(endpoint), f"{endpoint} to answer")
    push("reports", 20)
    wait_until(lambda: pending() == 0, "the workers to settle every job")

    def completed() -> float:
        return sum(
            value(samples, "postkit_jobs_total", queue="reports", outcome="completed")
            for samples in (try_scrape(endpoint) or [] for endpoint in endpoints)
        )

    # Each process counts the jobs it settled; together, every job once.
    wait_until(lambda: completed() == 20, "the two endpoints to count the 20 jobs together")
    assert supervisor.terminate() == 0, supervisor.output()
    (started,) = [line for line in supervisor.output().splitlines() if "worker started" in line]
    assert started.endswith(f", metrics on http://127.0.0.1:{port}-{port + 1}/metrics")


# -------------------------------------------------------------------------------------------
# A tasks App
# -------------------------------------------------------------------------------------------

APP_TASKS = """
import os
from pathlib import Path

from postkit.tasks import App

with open(Path(__file__).with_name("pids.txt"), "a") as pids:
    pids.write(f"{{os.getpid()}}\\n")

app = App(namespace={namespace!r})


@app.task(queue="send_otp", max_attempts=3, backoff_base=2)
def send_otp(user_id, *, channel="whatsapp"):
    with open(Path(__file__).with_name("calls.txt"), "a") as calls:
        calls.write(f"{{user_id}} {{channel}}\\n")
"""


def app_dir(tmp_path: Path, namespace: str) -> Path:
    (tmp_path / "tasks.py").write_text(APP_TASKS.format(namespace=namespace))
    return tmp_path


def calls_made(directory: Path) -> list[str]:
    path = directory / "calls.txt"
    return sorted(path.read_text().splitlines()) if path.exists() else []


@pytest.mark.parametrize("processes", [1, 2])
def test_postkit_worker_runs_an_app_in_its_namespace_and_applies_its_policies_once(
    tmp_path: Path,
    dsn: str,
    namespace: str,
    make_client: Callable[[], QueueClient],
    processes: int,
) -> None:
    directory = app_dir(tmp_path, namespace)
    client = make_client()
    client.push("send_otp", {"args": ["1"]})
    client.push("send_otp", {"kwargs": {"user_id": "2", "channel": "sms"}})
    client.cursor.connection.commit()
    worker = WorkerProcess(
        ["tasks", "--dsn", dsn, "--processes", str(processes), "--poll-interval", "0.5"],
        cwd=directory,
        log_path=directory / "worker.log",
    )
    try:
        wait_until(lambda: calls_made(directory) == ["1 whatsapp", "2 sms"], "both tasks to run")
        assert worker.terminate() == 0, worker.output()
    finally:
        worker.close()
        for pid in import_pids(directory):
            if is_our_worker(pid, namespace):
                os.kill(pid, signal.SIGKILL)

    output = worker.output()
    applied = [line for line in output.splitlines() if "applied the policy" in line]
    assert len(applied) == 1, output
    assert applied[0].endswith(
        "INFO postkit.tasks: queue send_otp: applied the policy of task send_otp "
        "(max_attempts 3, backoff_base 2); in force: max attempts 3, visibility timeout 30s, "
        "backoff 2s doubling up to 3600s"
    ), applied[0]
    assert f"worker started: namespace {namespace!r}, queues send_otp, " in output
    policy = client.queue_policy("send_otp")
    assert (policy.max_attempts, policy.backoff_base) == (3, 2)


def test_postkit_worker_refuses_a_namespace_other_than_the_apps(
    tmp_path: Path, dsn: str, namespace: str
) -> None:
    directory = app_dir(tmp_path, namespace)

    result = run_cli(directory, "tasks", "--namespace", "other", "--dsn", dsn)

    assert result.returncode == 2
    assert (
        f"Invalid value for '--namespace': tasks:app is an App of namespace {namespace!r}, "
        f"where its tasks push; leave --namespace out, or make it {namespace!r}"
    ) in result.stderr
    assert "Traceback" not in result.stderr


def test_the_processes_stop_when_their_supervisor_is_killed_with_sigkill(
    start_worker: Callable[..., WorkerProcess],
    make_client: Callable[..., QueueClient],
    tasks_dir: Path,
    namespace: str,
) -> None:
    client = make_client(autocommit=True)
    supervisor = start_worker("--processes", "2", "--concurrency", "1")

    def children() -> list[int]:
        return [pid for pid in import_pids(tasks_dir) if pid != supervisor.pid]

    first, second = wait_until(lambda: children() if len(children()) == 2 else [], "2 children")
    wait_until(lambda: len(client.workers()) == 2, "both processes to register")
    os.kill(supervisor.pid, signal.SIGKILL)

    wait_until(
        lambda: not any(is_our_worker(pid, namespace) for pid in (first, second)),
        "the children to stop after their supervisor died",
    )
    # Each stopped as on SIGTERM, deregistering (a killed worker would stay registered).
    assert client.workers() == []
    assert supervisor.output().count("is gone: stopping") == 2, supervisor.output()

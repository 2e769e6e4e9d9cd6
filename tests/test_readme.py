"""The guide's Python blocks run as written, in order, against a fresh database; so do its
"From SQL" install line and psql block. The guide is the pages of the documentation site's
Guide section (mkdocs.yml), read in the site's order: the README points to them."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from postkit.queue import QueueClient, install
from tests.signals import wait_until

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def guide_pages() -> list[Path]:
    """The Guide section of mkdocs.yml's nav, in order."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    section = nav[nav.index("  - Guide:") : nav.index("  - How-to:")]
    return [DOCS / page for page in re.findall(r": (guide/[\w-]+\.md)$", section, re.MULTILINE)]


def guide() -> str:
    return "\n".join(page.read_text(encoding="utf-8") for page in guide_pages())


def blocks(language: str) -> list[str]:
    pattern = rf"```{language}\n(.*?)```"
    return re.findall(pattern, guide(), re.DOTALL)


MODULE_MARK = "# tasks.py\n"
"""The first line of the guide's one Python block that is a module to save, not a step."""
TESTS_MARK = "# test_tasks.py\n"
"""The first line of the guide's test file for that module (under "Testing your tasks")."""


def python_blocks() -> list[str]:
    """The Python blocks that run in order as one script: all but the files to save."""
    return [
        block
        for block in blocks("python")
        if not block.startswith(MODULE_MARK) and not block.startswith(TESTS_MARK)
    ]


def tasks_module() -> str:
    (module,) = [block for block in blocks("python") if block.startswith(MODULE_MARK)]
    return module


def readme_test_file() -> str:
    (module,) = [block for block in blocks("python") if block.startswith(TESTS_MARK)]
    return module


def workers_section() -> str:
    text = (DOCS / "guide" / "workers.md").read_text(encoding="utf-8")
    return text[text.index("## A complete worker in ten lines") : text.index("## The article's")]


def from_sql_section() -> str:
    return (DOCS / "guide" / "from-sql.md").read_text(encoding="utf-8")


def test_the_guide_is_every_page_under_docs_guide() -> None:
    assert sorted(guide_pages()) == sorted((DOCS / "guide").glob("*.md"))


def test_readme_has_the_articles_snippets() -> None:
    code = "\n".join(python_blocks())

    for call in (
        "push(",
        "pull(",
        "ack(",
        "nack(",
        "fail(",
        "extend_visibility(",
        "tick_timeouts(",
        "dead_letters(",
    ):
        assert call in code


def test_readme_python_blocks_run_as_written(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POSTKIT_DSN", fresh_database)
    scope: dict[str, object] = {"__name__": "__main__"}  # as one script run by itself

    for block in python_blocks():
        exec(compile(block, "docs/guide", "exec"), scope)

    output = capsys.readouterr().out
    assert "OTP sent to user 1" in output  # the article's worker, by hand
    assert "OTP sent to user 2" in output  # worker(stop_when_idle=True) ran and returned
    # The typed tasks' block pushed its jobs in the payload's documented shape.
    typed = QueueClient(scope["connection"].cursor(), namespace="my-app")  # type: ignore[attr-defined]
    pushed = typed.get_job(scope["job_id"])  # type: ignore[arg-type]
    assert pushed is not None and pushed.queue == "send_welcome"
    assert pushed.payload == {"args": [], "kwargs": {"user_id": "42"}}
    for name in ("connection", "worker_connection"):
        scope[name].close()  # type: ignore[attr-defined]


def test_the_readmes_worker_module_runs_with_the_command_after_it(
    fresh_database: str, tmp_path: Path
) -> None:
    (command,) = re.findall(r"```console\n(.*?)\n```", workers_section(), re.DOTALL)
    assert command.startswith("postkit worker tasks ")
    assert "Worker(" not in tasks_module()  # the module only defines; the command runs it
    (tmp_path / "tasks.py").write_text(tasks_module(), encoding="utf-8")
    with psycopg.connect(fresh_database) as connection:
        install(connection)
        queue = QueueClient(connection.cursor(), namespace="my-app")
        sent, unknown = (
            queue.push("send_otp", {"user_id": "7"}),
            queue.push("send_otp", {"user_id": "0"}),
        )
        connection.commit()
    env = {**os.environ, "POSTKIT_DSN": fresh_database, "PYTHONUNBUFFERED": "1"}
    postkit = [sys.executable, "-m", "postkit.cli", *command.split()[1:]]

    with subprocess.Popen(
        postkit, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as worker:
        try:
            with psycopg.connect(fresh_database, autocommit=True) as watcher:
                watching = QueueClient(watcher.cursor(), namespace="my-app")

                def both_settled() -> bool:
                    assert worker.poll() is None, worker.communicate()
                    return watching.get_job(sent) is None and bool(
                        watching.dead_letters("send_otp")
                    )

                wait_until(both_settled, "the worker to settle both jobs", 30)
                (dead,) = watching.dead_letters("send_otp")
        finally:
            worker.send_signal(signal.SIGTERM)
            stdout, stderr = worker.communicate(timeout=30)

    assert worker.returncode == 0, stderr
    assert "OTP sent to 7" in stdout
    assert dead.job_id == unknown
    assert dead.error.startswith("PermanentError: no such user\n")


def test_the_readmes_test_file_passes_with_the_testing_plugin(
    server_dsn: str, tmp_path: Path
) -> None:
    (tmp_path / "tasks.py").write_text(tasks_module(), encoding="utf-8")
    (tmp_path / "test_tasks.py").write_text(readme_test_file(), encoding="utf-8")
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["postkit.testing"]\n')
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "POSTKIT_TEST_DSN": server_dsn, "PYTHONPATH": f"{src}:{tmp_path}"}

    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout


def test_the_readme_describes_the_clis_errors_as_they_print(dsn: str) -> None:
    from click.testing import CliRunner

    from postkit.cli import main

    text = " ".join(guide().split())
    usage = CliRunner().invoke(main, ["jobs", "q", "--limit", "0", "--dsn", dsn])
    refused = CliRunner().invoke(main, ["stats", "--queue", " ", "--dsn", dsn])

    assert "Errors end with one `Error:` line, never a traceback; a usage mistake" in text
    assert "adds click's usage hint above it" in text
    assert "errors are one line" not in text
    *hint, last = usage.output.strip().splitlines()
    assert usage.exit_code == 2 and last.startswith("Error: ") and hint[0].startswith("Usage: ")
    assert refused.exit_code == 2 and refused.output.startswith("Error: ")
    assert len(refused.output.strip().splitlines()) == 1


@pytest.mark.skipif(shutil.which("psql") is None, reason="needs psql")
def test_readme_sql_runs_as_written_with_psql(fresh_database: str) -> None:
    section = from_sql_section()
    (install,) = re.findall(r"```console\n(.*?)\n```", section, re.DOTALL)
    (script,) = re.findall(r"```sql\n(.*?)```", section, re.DOTALL)
    assert install.startswith("postkit sql | psql ")
    env = {**os.environ, "DATABASE_URL": fresh_database}
    postkit = f"{sys.executable} -m postkit.cli"

    installed = subprocess.run(
        ["bash", "-c", install.replace("postkit", postkit, 1)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert installed.returncode == 0, installed.stderr
    ran = subprocess.run(
        ["psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", fresh_database],
        input=script,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert ran.returncode == 0, ran.stderr
    *results, dead = ran.stdout.splitlines()
    # extend_visibility, ack, the stale ack, nack, fail (tick_timeouts rescues nothing)
    assert results == ["t", "t", "f", "retried", "t"]
    assert dead.split("|")[1:] == ['{"user_id": "4"}', "failed", "1", "not on WhatsApp"]


def quick_start() -> str:
    (block,) = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    return str(block)


def test_the_quick_start_is_the_same_on_the_site_and_in_the_readme() -> None:
    (on_site,) = re.findall(
        r"```python\n(.*?)```", (DOCS / "index.md").read_text(encoding="utf-8"), re.DOTALL
    )
    assert on_site == quick_start()
    assert len(quick_start().strip().splitlines()) <= 14


def test_the_quick_start_pushes_a_job_and_its_worker_runs_it_until_ctrl_c(
    fresh_database: str, tmp_path: Path
) -> None:
    (tmp_path / "quickstart.py").write_text(quick_start(), encoding="utf-8")
    env = {**os.environ, "POSTKIT_DSN": fresh_database, "PYTHONUNBUFFERED": "1"}

    with subprocess.Popen(
        [sys.executable, "quickstart.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as script:
        try:
            assert script.stdout is not None
            line = script.stdout.readline()
            assert line == "OTP sent to 42\n", line + script.communicate(timeout=30)[1]
        finally:
            script.send_signal(signal.SIGINT)
            _, stderr = script.communicate(timeout=30)

    assert script.returncode == 0, stderr

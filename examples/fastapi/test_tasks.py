"""The welcome task, tested the way an application tests its own tasks: pushed in the test's
transaction, run in the test's process by ``postkit.testing.drain``, no worker needed."""

from __future__ import annotations

import pytest

from postkit.queue import QueueClient
from postkit.testing import assert_pushed, drain
from tasks import app, send_welcome


@pytest.fixture
def postkit_namespace() -> str:
    return app.namespace


def test_a_signup_queues_one_welcome(postkit_client: QueueClient) -> None:
    send_welcome.push(postkit_client.cursor, email="ada@example.com")

    assert_pushed(
        postkit_client, "send_welcome", {"args": [], "kwargs": {"email": "ada@example.com"}}
    )


def test_the_welcome_is_sent_and_returns_where_it_went(
    postkit_client: QueueClient, capsys: pytest.CaptureFixture[str]
) -> None:
    send_welcome.push(postkit_client.cursor, email="ada@example.com")

    (welcome,) = drain(postkit_client, app).values()

    assert welcome.state == "completed"
    assert welcome.result == {"sent_to": "ada@example.com"}
    assert "Welcome to the app, ada@example.com!" in capsys.readouterr().out

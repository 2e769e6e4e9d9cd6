"""Pydantic models as a task's arguments: validated and pushed in their JSON form, checked
before any SQL, validated back into the model by a real worker, and a payload that no longer
validates dead-lettered at once; Postkit imports pydantic only for an application that does.

The models are this module's, and its annotations strings (``from __future__ import
annotations``): a task resolves them in the function's module when it is declared."""

from __future__ import annotations

import os
import queue as stdlib_queue
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel, field_validator

from postkit.errors import InvalidArgumentsError, PermanentError
from postkit.queue import Job, QueueClient
from postkit.tasks import App, Task
from tests.signals import wait_until
from tests.tasks.test_tasks import NoSQL
from tests.tasks.test_tasks_worker import dead, gone, next_item, pushed_from_sql

StartWorker = Callable[..., Any]
JobOf = Callable[[int | None], Job]


class Item(BaseModel):
    sku: str
    quantity: int = 1


class Order(BaseModel):
    id: int
    placed_at: datetime
    items: list[Item] = []


class OrderBeforePlacedAt(BaseModel):
    """Order as an older release of the application had it: no ``placed_at``."""

    id: int


class Positive(BaseModel):
    n: int

    @field_validator("n")
    @classmethod
    def positive(cls, n: int) -> int:
        if n <= 0:
            raise ValueError("must be positive")
        return n


PLACED = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
ORDER = Order(id=7, placed_at=PLACED, items=[Item(sku="book", quantity=2)])
ORDER_JSON = {
    "id": 7,
    "placed_at": "2030-01-02T03:04:05Z",
    "items": [{"sku": "book", "quantity": 2}],
}


@pytest.fixture
def ship(app: App) -> Task[..., None]:
    @app.task(queue="ship")
    def ship(order: Order, *, express: bool = False) -> None: ...

    return ship


# ---------------------------------------------------------------------------------------------
# The producer's side.
# ---------------------------------------------------------------------------------------------


def test_a_model_is_pushed_as_its_json_form_whether_given_as_a_model_or_a_dict(
    ship: Task[..., None], conn: psycopg.Connection[Any], job_of: JobOf
) -> None:
    as_model = ship.push(conn.cursor(), ORDER)
    as_dict = ship.push(conn.cursor(), order={**ORDER_JSON, "id": "7"}, express=True)
    many = ship.push_many(conn.cursor(), [{"order": ORDER}, {"order": ORDER_JSON}])
    conn.commit()

    assert job_of(as_model).payload == {"args": [], "kwargs": {"order": ORDER_JSON}}
    assert job_of(as_dict).payload == {
        "args": [],
        "kwargs": {"order": ORDER_JSON, "express": True},  # validated: "7" became 7
    }
    assert [job_of(job_id).payload["kwargs"]["order"] for job_id in many] == [ORDER_JSON] * 2


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda task: task.push(NoSQL(), {"id": "x", "items": [{"quantity": 2}]}),
            "ship(order, *, express=False): argument order is not a valid Order: id: Input "
            "should be a valid integer, unable to parse string as an integer; placed_at: Field "
            "required; items.0.sku: Field required",
        ),
        (
            lambda task: task.push(NoSQL(), order=Item(sku="book")),
            "ship(order, *, express=False): argument order is not a valid Order: ",
        ),
        (
            lambda task: task.push_many(NoSQL(), [{"order": ORDER}, {"order": {"id": 1}}]),
            "push_many's call 1: ship(order, *, express=False): argument order is not a valid "
            "Order: placed_at: Field required",
        ),
    ],
    ids=["dict", "another-model", "push-many"],
)
def test_an_argument_that_does_not_validate_raises_before_any_sql_naming_its_parameter(
    ship: Task[..., None], call: Callable[[Task[..., None]], Any], message: str
) -> None:
    with pytest.raises(InvalidArgumentsError) as raised:
        call(ship)
    assert str(raised.value).startswith(message), str(raised.value)
    assert "\n" not in str(raised.value) and "https://" not in str(raised.value)


def test_a_models_own_validator_runs_at_push(app: App) -> None:
    @app.task(queue="count")
    def count(step: Positive) -> None: ...

    with pytest.raises(InvalidArgumentsError, match=r"argument step is not a valid Positive: n: "):
        count.push(NoSQL(), Positive.model_construct(n=-1))  # built without validation
    with pytest.raises(InvalidArgumentsError, match=r"n: Value error, must be positive$"):
        count.push(NoSQL(), {"n": 0})
    assert count.payload(Positive(n=3)) == {"args": [], "kwargs": {"step": {"n": 3}}}


def test_a_model_passed_to_a_parameter_that_is_not_annotated_with_it_is_refused_with_a_hint(
    app: App,
) -> None:
    @app.task(queue="plain")
    def plain(order: dict[str, Any]) -> None: ...

    with pytest.raises(InvalidArgumentsError, match="annotate its parameter with the model's"):
        plain.push(NoSQL(), ORDER)


def models(*orders: Order, note: Item | None = None, **by_name: Order) -> dict[str, Any]:
    return {"orders": orders, "note": note, "by_name": by_name}


def test_optional_list_args_and_kwargs_annotations_hold_models_too(app: App) -> None:
    @app.task(queue="batch")
    def batch(orders: list[Order], note: Item | None = None) -> None: ...

    spread = app.task(queue="spread")(models)
    other = Order(id=8, placed_at=PLACED)

    payload = batch.payload([ORDER, ORDER_JSON], note=None)
    assert payload == {"args": [], "kwargs": {"orders": [ORDER_JSON, ORDER_JSON], "note": None}}
    assert batch.signature.decode(payload) == ([], {"orders": [ORDER, ORDER], "note": None})
    payload = spread.payload(ORDER, other, note=Item(sku="pen"), gift=ORDER)
    assert payload["args"] == [ORDER_JSON, other.model_dump(mode="json")]
    args, kwargs = spread.signature.decode(payload)
    assert models(*args, **kwargs) == models(ORDER, other, note=Item(sku="pen"), gift=ORDER)
    with pytest.raises(InvalidArgumentsError, match=r"argument orders\[1\] is not a valid Order"):
        spread.payload(ORDER, {"id": 1})


def test_unique_by_a_model_keys_each_job_by_its_json_form(
    app: App, conn: psycopg.Connection[Any]
) -> None:
    @app.task(queue="ship_once", unique_by=("order",))
    def ship_once(order: Order) -> None: ...

    first = ship_once.push(conn.cursor(), ORDER)
    again = ship_once.push(conn.cursor(), ORDER_JSON)

    assert first is not None and again is None


def test_the_worker_side_decodes_the_json_form_back_into_the_model(
    ship: Task[..., None],
) -> None:
    args, kwargs = ship.signature.decode({"kwargs": {"order": ORDER_JSON}})

    assert (args, kwargs) == ([], {"order": ORDER})
    assert type(kwargs["order"]) is Order and type(kwargs["order"].items[0]) is Item
    with pytest.raises(PermanentError) as raised:
        ship.signature.decode({"args": [], "kwargs": {"order": {"id": 1}}})
    assert str(raised.value) == (
        "the payload does not fit ship(order, *, express=False): argument order is not a valid "
        "Order: placed_at: Field required"
    )


def test_a_model_annotation_pydantic_cannot_validate_is_refused_when_the_task_is_declared(
    app: App,
) -> None:
    def odd(order: Order | NoSQL) -> None: ...

    with pytest.raises(InvalidArgumentsError, match=r"odd\(order\): pydantic cannot validate"):
        app.task(queue="odd")(odd)


# ---------------------------------------------------------------------------------------------
# The worker's side.
# ---------------------------------------------------------------------------------------------


def test_a_worker_calls_the_task_with_the_model_it_was_pushed_with(
    app: App, start_worker: StartWorker, client: QueueClient
) -> None:
    calls: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()

    @app.task(queue="ship")
    def ship(order: Order, *, express: bool = False) -> None:
        calls.put((order, express))

    start_worker(app)
    job_id = ship.push(client.cursor, ORDER, express=True)

    order, express = next_item(calls, "the task to run")
    assert (type(order), order, express) == (Order, ORDER, True)
    wait_until(gone(client, job_id), "the job to be acked")


def test_a_payload_that_no_longer_validates_is_dead_lettered_at_once_and_the_worker_goes_on(
    app: App, namespace: str, start_worker: StartWorker, client: QueueClient
) -> None:
    calls: stdlib_queue.SimpleQueue[Order] = stdlib_queue.SimpleQueue()

    @app.task(queue="ship", max_attempts=5)
    def ship(order: Order) -> None:
        calls.put(order)

    # A job an older release pushed, when Order had no placed_at; and one written through SQL.
    old_release = App(namespace=namespace)
    old_ship = old_release.task(queue="ship")(_ship_before_placed_at)
    old = old_ship.push(client.cursor, OrderBeforePlacedAt(id=1))
    assert old is not None
    by_hand = pushed_from_sql(client, "ship", '{"kwargs": {"order": {"id": "one"}}}')
    worker = start_worker(app)

    for job_id, problems in (
        (old, "placed_at: Field required"),
        (by_hand, "id: Input should be a valid integer, unable to parse string as an integer"),
    ):
        job = dead(client, job_id)
        [entry] = job.errors
        assert (entry["kind"], job.attempts) == ("fail", 1), "dead at once, without retries"
        assert entry["error"].startswith(
            "PermanentError: the payload does not fit ship(order): argument order is not a "
            f"valid Order: {problems}"
        ), entry["error"]
    good = ship.push(client.cursor, ORDER)
    assert next_item(calls, "the good job to run") == ORDER
    wait_until(gone(client, good), "the good job to be acked")
    assert worker.stats.dead_lettered == 2


def _ship_before_placed_at(order: OrderBeforePlacedAt) -> None: ...


# ---------------------------------------------------------------------------------------------
# No dependency.
# ---------------------------------------------------------------------------------------------


def test_postkit_imports_pydantic_only_for_an_application_that_does(tmp_path: Path) -> None:
    script = """
import sys
from postkit.tasks import App

app = App(namespace="no-pydantic")

@app.task(queue="plain")
def plain(user_id: str, *, note: dict = {}) -> None: ...

payload = plain.payload("42", note={"a": 1})
assert plain.signature.decode(payload) == ([], {"user_id": "42", "note": {"a": 1}})
assert "pydantic" not in sys.modules, sorted(name for name in sys.modules if "pydantic" in name)
print("ok")
"""
    src = Path(__file__).resolve().parents[2] / "src"
    run = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(src)},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert (run.returncode, run.stdout) == (0, "ok\n"), run.stderr

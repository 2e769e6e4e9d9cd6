"""Typed tasks as an application's typed code uses them: tests/tasks/test_typed.py runs
``mypy --strict`` over this module. A line that ends in ``# mypy: CODE`` must get an error of
that code, and no other line any error. Never imported or run."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import psycopg
from pydantic import BaseModel

from postkit import tasks

app = tasks.App(namespace="my-app")


class Order(BaseModel):
    id: int
    items: list[str] = []


@app.task(queue="send_otp", max_attempts=5, timeout=30)
def send_otp(user_id: str, *, channel: str = "whatsapp") -> dict[str, str]:
    return {"sent_to": user_id, "by": channel}


@app.task(queue="resize")
async def resize(path: str, *sizes: int) -> None: ...


@app.task(queue="ship")
def ship(order: Order, *, express: bool = False) -> None: ...


@app.task(queue="receipts", transactional=True)
def record_receipt(cursor: psycopg.Cursor[Any], order_id: int, *, note: str = "") -> int:
    cursor.execute("INSERT INTO receipts (order_id) VALUES (%s)", (order_id,))
    return order_id


def register(cursor: Any) -> list[int | None]:
    ids = [
        send_otp.push(cursor, user_id="42"),
        send_otp.push(cursor, "42", channel="sms"),
        send_otp.options(delay=10).push(cursor, "42"),
        send_otp.options(run_at=datetime(2030, 1, 1, tzinfo=timezone.utc)).push(cursor, "7"),
        *send_otp.push_many(cursor, [{"user_id": "1"}, {"user_id": "2"}]),
    ]
    sent: dict[str, str] = send_otp("42")
    send_otp.push(cursor, uid=42)  # mypy: call-arg
    send_otp.push(cursor, user_id=42)  # mypy: arg-type
    send_otp.push(cursor, "42", "sms")  # mypy: call-arg
    send_otp.push(cursor)  # mypy: call-arg
    send_otp.options(delay=10).push(cursor, user="42")  # mypy: call-arg
    return [*ids, len(sent)]


def register_models_and_transactional(cursor: psycopg.Cursor[Any]) -> list[int | None]:
    ids = [
        ship.push(cursor, Order(id=1, items=["book"])),
        ship.options(priority=5).push(cursor, order=Order(id=2), express=True),
        record_receipt.push(cursor, 7),
        record_receipt.push(cursor, order_id=7, note="gift"),
        record_receipt.options(delay=5).push(cursor, 8),
        record_receipt(cursor, 9),
    ]
    ship.push(cursor, "1")  # mypy: arg-type
    ship.push(cursor, Order(id=1), True)  # mypy: call-arg
    record_receipt.push(cursor, order_id="7")  # mypy: arg-type
    record_receipt.push(cursor, cursor=cursor, order_id=7)  # mypy: call-arg
    record_receipt(7)  # mypy: call-arg
    return ids


async def register_async(cursor: Any) -> int | None:
    await resize.push_async(cursor, "a.png", 64, 128)
    await resize.push_async(cursor, "a.png", "big")  # mypy: arg-type
    return await send_otp.push_async(cursor, user_id="42")

"""Typed tasks as an application's typed code uses them: tests/tasks/test_typed.py runs
``mypy --strict`` over this module. A line that ends in ``# mypy: CODE`` must get an error of
that code, and no other line any error. Never imported or run."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from postkit import tasks

app = tasks.App(namespace="my-app")


@app.task(queue="send_otp", max_attempts=5, timeout=30)
def send_otp(user_id: str, *, channel: str = "whatsapp") -> dict[str, str]:
    return {"sent_to": user_id, "by": channel}


@app.task(queue="resize")
async def resize(path: str, *sizes: int) -> None: ...


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


async def register_async(cursor: Any) -> int | None:
    await resize.push_async(cursor, "a.png", 64, 128)
    await resize.push_async(cursor, "a.png", "big")  # mypy: arg-type
    return await send_otp.push_async(cursor, user_id="42")

"""A FastAPI app whose signup saves the user and queues their welcome email in one
transaction, on the request's own connection: both commit, or neither does.

Run it with ``uvicorn app:app``, and its worker with ``postkit worker tasks``. The database is
the one ``POSTKIT_DSN`` or ``DATABASE_URL`` names, else Postkit's embedded PostgreSQL (as for
the ``postkit`` command); ``postkit install`` installs the queue schema there first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Annotated, Any

import psycopg
from fastapi import Depends, FastAPI, HTTPException, Request
from psycopg_pool import ConnectionPool
from pydantic import BaseModel

from postkit.embedded import resolve_dsn
from postkit.queue import QueueClient
from tasks import send_welcome

TABLE = """
CREATE TABLE IF NOT EXISTS fastapi_users (
    id bigserial PRIMARY KEY,
    email text NOT NULL UNIQUE,
    welcome_job bigint          -- the job that sends the welcome email
)
"""


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Open the pool, create the app's table, and keep the welcomes' results for a day."""
    with ConnectionPool(resolve_dsn(), open=True) as pool:
        with pool.connection() as connection:
            connection.execute(TABLE)
            queue = QueueClient(connection.cursor(), namespace=send_welcome.namespace)
            queue.configure_queue(send_welcome.queue, retain_results=timedelta(days=1))
        app.state.pool = pool
        yield


app = FastAPI(lifespan=lifespan)


def database(request: Request) -> Iterator[psycopg.Connection[Any]]:
    """The request's own connection, from the pool; it goes back when the request is done."""
    pool: ConnectionPool[psycopg.Connection[Any]] = request.app.state.pool
    with pool.connection() as connection:
        yield connection


Database = Annotated[psycopg.Connection[Any], Depends(database)]


class Signup(BaseModel):
    email: str


@app.post("/signup", status_code=202)
def signup(form: Signup, connection: Database) -> dict[str, Any]:
    """Queue the welcome and save the user, in one transaction. The job is pushed first, so
    that the user's row records its id: a duplicate email then rolls back the job too."""
    try:
        with connection.transaction(), connection.cursor() as cursor:
            job_id = send_welcome.push(cursor, email=form.email)
            cursor.execute(
                "INSERT INTO fastapi_users (email, welcome_job) VALUES (%s, %s) RETURNING id",
                (form.email, job_id),
            )
            [(user_id,)] = cursor.fetchall()
    except psycopg.errors.UniqueViolation:
        raise HTTPException(409, f"{form.email} has already signed up") from None
    return {"user_id": user_id, "welcome_job": job_id}


@app.get("/users/{user_id}")
def user(user_id: int, connection: Database) -> dict[str, Any]:
    """The user, and what became of their welcome: pending, then completed with its result."""
    with connection.transaction(), connection.cursor() as cursor:
        cursor.execute("SELECT email, welcome_job FROM fastapi_users WHERE id = %s", (user_id,))
        row = cursor.fetchone()
        if row is None:
            raise HTTPException(404, f"no user {user_id}")
        email, job_id = row
        welcome = QueueClient(cursor, namespace=send_welcome.namespace).result(job_id)
    return {"email": email, "welcome": {"state": welcome.state, "result": welcome.value}}

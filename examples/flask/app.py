"""A Flask app whose signup saves the user and queues their welcome email in one
transaction, on the request's own connection: both commit, or neither does.

Run it with ``flask --app app run``, and its worker with ``postkit worker tasks --namespace
flask-example``. The database is the one ``POSTKIT_DSN`` or ``DATABASE_URL`` names, else
Postkit's embedded PostgreSQL (as for the ``postkit`` command); ``postkit install`` installs the
queue schema there first.
"""

from __future__ import annotations

import atexit
from typing import Any

import psycopg
from flask import Flask, abort, request
from psycopg_pool import ConnectionPool

from postkit.embedded import resolve_dsn
from postkit.queue import QueueClient

NAMESPACE = "flask-example"

TABLE = """
CREATE TABLE IF NOT EXISTS flask_users (
    id bigserial PRIMARY KEY,
    email text NOT NULL UNIQUE,
    welcome_job bigint,         -- the job that sends the welcome email
    welcomed_at timestamptz     -- set by that job's handler, in its ack's transaction
)
"""


def create_app() -> Flask:
    """The app (``flask --app app run`` calls this), with a pool of connections to the
    database in ``app.extensions["pool"]``, closed at exit; its table is created if missing."""
    pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(resolve_dsn(), open=True)
    atexit.register(pool.close)
    with pool.connection() as connection:
        connection.execute(TABLE)
    app = Flask(__name__)
    app.extensions["pool"] = pool

    @app.post("/signup")
    def signup() -> tuple[dict[str, Any], int]:
        """Queue the welcome and save the user, in one transaction on the request's own
        connection (committed as the block ends, rolled back if it raises). The job is pushed
        first, so that the user's row records its id: a duplicate email rolls back the job too."""
        email = request.form["email"]
        try:
            with pool.connection() as connection, connection.cursor() as cursor:
                queue = QueueClient(cursor, namespace=NAMESPACE)
                job_id = queue.push("send_welcome", {"email": email})
                cursor.execute(
                    "INSERT INTO flask_users (email, welcome_job) VALUES (%s, %s) RETURNING id",
                    (email, job_id),
                )
                [(user_id,)] = cursor.fetchall()
        except psycopg.errors.UniqueViolation:
            return {"error": f"{email} has already signed up"}, 409
        return {"user_id": user_id, "welcome_job": job_id}, 202

    @app.get("/users/<int:user_id>")
    def user(user_id: int) -> dict[str, Any]:
        """The user, and when their welcome was sent (null until the worker has sent it)."""
        with pool.connection() as connection:
            row = connection.execute(
                "SELECT email, welcomed_at FROM flask_users WHERE id = %s", (user_id,)
            ).fetchone()
        if row is None:
            abort(404, f"no user {user_id}")
        email, welcomed_at = row
        return {"email": email, "welcomed_at": welcomed_at and welcomed_at.isoformat()}

    return app

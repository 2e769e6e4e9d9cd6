"""The queue client: every role's calls on top of the caller's own cursor, for a script, a test
or the article's story. Each role has its client of its own: a producer's
(:mod:`postkit.queue.producer_async`), a consumer's (:mod:`postkit.queue.consumer_async`) and an
operator's (:mod:`postkit.queue.operator_async`).

client_async.py is the source of both clients: the asyncio client (for psycopg 3 async cursors)
is written there, and client.py, the synchronous client (for any DB-API cursor), is generated
from it by tools/async_to_sync.py; a test checks that the two are in step. Both only execute,
through postkit.queue.executor, the calls that postkit.queue.protocol builds, so they share
every statement, check and error.
"""

from __future__ import annotations

from postkit.queue.consumer_async import AsyncConsumer
from postkit.queue.operator_async import AsyncOperator
from postkit.queue.producer_async import AsyncProducer
from postkit.queue.runtime_async import AsyncRuntime


class AsyncQueueClient(AsyncProducer, AsyncConsumer, AsyncOperator, AsyncRuntime):
    """Push, pull and settle jobs through a DB-API cursor the caller owns.

    The client never commits or rolls back: each call is one statement in the caller's current
    transaction. A push therefore commits, or vanishes, together with the caller's own writes;
    a pull's claim sticks when the caller commits; an ack commits with whatever else the caller
    wrote in its transaction.

    The synchronous client takes any DB-API cursor: psycopg 3 (tuple, dict or namedtuple rows),
    psycopg2, or Django's ``connection.cursor()``. The asyncio client takes a psycopg 3 async
    cursor.

    Invalid arguments raise a :class:`postkit.errors.ValidationError` subclass before anything
    is sent, so the caller's transaction and its own writes are untouched: the client checks
    every limit the SQL functions check (:mod:`postkit.queue.limits`). The one exception is a
    payload larger than its queue's ``max_payload_bytes``, a setting only the database knows:
    the SQL module refuses it, and like any failed statement that aborts the current
    transaction, so the caller rolls back before going on. Errors the SQL module does not own
    (a lost connection, a deadlock) are raised as the driver raised them.

    It is every role's calls in one object, for a script, a test or the article's story: a
    :class:`~postkit.queue.producer_async.AsyncProducer`'s pushes, an
    :class:`~postkit.queue.consumer_async.AsyncConsumer`'s claims and settles (with its memory
    of the claims it pulled), an :class:`~postkit.queue.operator_async.AsyncOperator`'s
    steering, and the calls the worker runtime makes besides its claims
    (:class:`~postkit.queue.runtime_async.AsyncRuntime`). An application gives each of its parts
    the role client it needs, under the role its grant names.
    """

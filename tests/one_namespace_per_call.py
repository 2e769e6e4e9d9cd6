"""The suite's check that each call touches only the namespace it was given (issue 16): on
Citus each call runs on the node that owns its namespace, where no other namespace's rows are.

With ``POSTKIT_TEST_ONE_NAMESPACE_PER_CALL=1`` (CI's second run sets it), the test databases
that the shared fixtures install (``dsn``, and ``database`` in tests/queue) get a restrictive
row-level security policy on every table with a namespace column: while a call of one
namespace runs, a row of another can be neither seen nor written, so a statement that reaches
one fails its test (a missing row, a policy violation). The SDK's one executor
(:mod:`postkit.queue.executor`) is wrapped in this process so that each statement it sends
with a namespace starts with a comment that names it (:func:`marked`), which the policy reads
from ``current_query()``, the statement the client sent, inside every function it calls. The
API functions run as the queue's owner, a non-superuser on whom row-level security is forced,
so the policy holds inside every function, whoever calls it; the tests' own reads of the
tables, as a superuser, bypass it.

What the check does not reach: calls from other processes (the CLI and the workers the tests
start), and statements that tests send by hand; without the comment, the policy lets every
namespace through.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg

from postkit.queue import executor

ENABLED = os.environ.get("POSTKIT_TEST_ONE_NAMESPACE_PER_CALL") == "1"

# The namespace in hexadecimal, so that no namespace can end the comment early.
_MARK = "/* postkit_test namespace={} */ "
_NAMESPACE_OF_THE_CALL = (
    r"convert_from(decode(substring(current_query() "
    r"FROM '^/\* postkit_test namespace=([0-9a-f]*) \*/'), 'hex'), 'UTF8')"
)

# Permissive: without any, row-level security shows no row at all. It yields to tenant
# isolation's own policy once a test turns that on (its init plan runs once per statement).
# Restrictive: AND-ed with every permissive policy, tenant isolation's included.
_POLICIES = """
DO $policy$
DECLARE
    v_table regclass;
BEGIN
    FOR v_table IN
        SELECT c.oid::regclass FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = 'namespace'
        WHERE c.relnamespace = 'postkit_queue'::regnamespace AND c.relkind = 'r'
          AND c.relname <> 'tenants'
    LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', v_table);
        EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', v_table);
        EXECUTE format(
            'CREATE POLICY postkit_test_open ON %s USING (NOT EXISTS ('
            'SELECT FROM pg_catalog.pg_policy p WHERE p.polrelid = ''postkit_queue.jobs''::regclass'
            ' AND p.polname = ''tenant_isolation''))', v_table);
        EXECUTE format(
            'CREATE POLICY postkit_test_one_namespace ON %s AS RESTRICTIVE '
            'USING (coalesce({call}, namespace) = namespace) '
            'WITH CHECK (coalesce({call}, namespace) = namespace)', v_table);
    END LOOP;
END
$policy$;
""".replace("{call}", _NAMESPACE_OF_THE_CALL.replace("'", "''"))


def marked(query: str, namespace: str) -> str:
    """``query`` as a call of ``namespace``: the policy lets it reach that namespace alone."""
    return _MARK.format(namespace.encode().hex()) + query


def install_policies(connection: psycopg.Connection) -> None:
    """Give the queue's tables in the connection's database the policies."""
    connection.execute(_POLICIES)


def apply_policies(dsn: str) -> None:
    """:func:`install_policies` in ``dsn``'s database, when the check is on."""
    if ENABLED:
        with psycopg.connect(dsn, autocommit=True) as connection:
            install_policies(connection)


def _namespace_of(params: Any) -> str | None:
    namespace = params.get("namespace") if isinstance(params, dict) else None
    return namespace if isinstance(namespace, str) else None


class _NamespacedCursor:
    """A cursor that marks each statement with a namespace as that namespace's call."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def _query(self, query: Any, params: Any) -> Any:
        namespace = _namespace_of(params)
        if namespace is None or not isinstance(query, str):
            return query
        return marked(query, namespace)

    def execute(self, query: Any, params: Any = None) -> Any:
        return self._cursor.execute(self._query(query, params), params)


class _NamespacedAsyncCursor(_NamespacedCursor):
    async def execute(self, query: Any, params: Any = None) -> Any:  # type: ignore[override]
        return await self._cursor.execute(self._query(query, params), params)


def wrap_the_executor() -> None:
    """Make every call the SDK sends in this process name its namespace, when the check is
    on."""
    if not ENABLED:
        return
    original = executor._cursor

    def _cursor(target: Any, given_to: str | None) -> Any:
        cursor = original(target, given_to)
        is_async = isinstance(cursor, psycopg.AsyncCursor) or isinstance(
            getattr(cursor, "connection", None), psycopg.AsyncConnection
        )
        return _NamespacedAsyncCursor(cursor) if is_async else _NamespacedCursor(cursor)

    executor._cursor = _cursor

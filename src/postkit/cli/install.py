"""``postkit install`` (the queue schema, roles and tenant isolation) and ``postkit sql`` (the
same schema as a script)."""

from __future__ import annotations

import json

import click
import psycopg

from postkit.cli.options import dsn_option, json_option
from postkit.embedded import resolve_dsn
from postkit.queue import install as install_queue
from postkit.queue import install_script
from postkit.queue.admin import (
    ACCESS_KINDS,
    Access,
    assign_namespace,
    distribute_on_citus,
    enable_tenant_isolation,
    grant_access,
    revoke_access,
)


def _role_access(value: str) -> tuple[str, Access]:
    role, _, access = value.partition(":")
    access = access or "worker"
    if not role or access not in ACCESS_KINDS:
        raise click.BadParameter(
            f"expected ROLE or ROLE:KIND with KIND one of {', '.join(ACCESS_KINDS)}, got {value!r}"
        )
    return role, access


def _namespace_role(value: str) -> tuple[str, str]:
    namespace, _, role = value.partition("=")
    if not namespace or not role:
        raise click.BadParameter(f"expected NAMESPACE=ROLE, got {value!r}")
    return namespace, role


@click.command()
@dsn_option
@json_option
@click.option(
    "--grant",
    "grants",
    multiple=True,
    metavar="ROLE[:KIND]",
    help="Give a database role what it needs and no more: KIND is producer (push), worker "
    "(also pull, settle and tick; the default) or operator (also inspect and steer). The role "
    "gets EXECUTE on those functions and nothing on the tables. Repeatable.",
)
@click.option(
    "--revoke",
    "revokes",
    multiple=True,
    metavar="ROLE",
    help="Take every Postkit privilege from ROLE. Repeatable.",
)
@click.option(
    "--tenant-isolation",
    is_flag=True,
    help="Turn on row-level security: each role sees only the namespaces assigned to it.",
)
@click.option(
    "--assign",
    "assignments",
    multiple=True,
    metavar="NAMESPACE=ROLE",
    help="Let ROLE (and its members) use NAMESPACE under tenant isolation. Repeatable.",
)
@click.option(
    "--citus",
    is_flag=True,
    help="On a Citus coordinator, also shard the queue by namespace and register its "
    "functions, so that each call runs on the node that owns its namespace "
    "(docs/scaling.md). Not needed on plain PostgreSQL.",
)
def install(
    dsn: str | None,
    as_json: bool,
    grants: tuple[str, ...],
    revokes: tuple[str, ...],
    tenant_isolation: bool,
    assignments: tuple[str, ...],
    citus: bool,
) -> None:
    """Install the queue schema (postkit_queue), or upgrade it in place.

    Idempotent: each migration is applied once and recorded in
    postkit_queue.migrations; a second run changes nothing.

    \b
    A role layout (create the roles first; run this as a superuser or the schema's owner;
    what each kind may do: docs/guarantees.md, "Roles"):
      postkit install --grant shop_web:producer --grant shop_worker:worker \\
                      --grant shop_ops:operator
      postkit install --tenant-isolation --assign shop=shop_web --assign shop=shop_worker

    \b
    On a Citus coordinator (CREATE EXTENSION citus first):
      postkit install --citus
    """
    role_grants = [_role_access(value) for value in grants]
    namespace_roles = [_namespace_role(value) for value in assignments]
    with psycopg.connect(resolve_dsn(dsn)) as connection:
        result = install_queue(connection)
        with connection.transaction(), connection.cursor() as cursor:
            for role in revokes:
                revoke_access(cursor, role)
            for role, access in role_grants:
                grant_access(cursor, role, access)
            for namespace, role in namespace_roles:
                assign_namespace(cursor, namespace, role)
            if tenant_isolation:
                enable_tenant_isolation(cursor)
            placed = distribute_on_citus(cursor) if citus else []
    if as_json:
        click.echo(
            json.dumps(
                {
                    "previous_version": result.previous_version,
                    "version": result.version,
                    "applied": list(result.applied),
                    "revoked": list(revokes),
                    "granted": [{"role": role, "access": access} for role, access in role_grants],
                    "assigned": [
                        {"namespace": namespace, "role": role}
                        for namespace, role in namespace_roles
                    ],
                    "tenant_isolation": tenant_isolation,
                    "citus": [
                        {"object": name, "placement": placement} for name, placement in placed
                    ],
                }
            )
        )
        return
    if result.applied:
        applied = ", ".join(str(version) for version in result.applied)
        if result.previous_version == 0:
            click.echo(
                f"postkit_queue installed at version {result.version} (migrations {applied})"
            )
        else:
            click.echo(
                f"postkit_queue upgraded from version {result.previous_version} to "
                f"{result.version} (applied migrations {applied})"
            )
    else:
        click.echo(f"postkit_queue is up to date at version {result.version}")
    for role in revokes:
        click.echo(f"revoked every Postkit privilege from {role}")
    for role, access in role_grants:
        click.echo(f"granted {access} access to {role}")
    for namespace, role in namespace_roles:
        click.echo(f"assigned namespace {namespace} to {role}")
    if tenant_isolation:
        click.echo("tenant isolation is on: each role sees only its own namespaces")
    if placed:
        tables = sum(1 for name, _ in placed if "(" not in name)
        delegated = sum(1 for _, placement in placed if placement.startswith("delegated"))
        click.echo(
            f"distributed on Citus: {tables} tables and {len(placed) - tables} functions "
            f"({delegated} delegated to the node of their namespace; pushes and the other "
            "calls that wake workers run on the coordinator, where the listeners are)"
        )


@click.command()
@click.option(
    "--no-transaction",
    is_flag=True,
    help="Leave out BEGIN/COMMIT, to embed the script in your own migration.",
)
def sql(no_transaction: bool) -> None:
    """Print the queue's install script: plain SQL, idempotent, upgrades in place.

    \b
    Example:
      postkit sql | psql -v ON_ERROR_STOP=1 "$DATABASE_URL"
    """
    click.echo(install_script(transaction=not no_transaction), nl=False)

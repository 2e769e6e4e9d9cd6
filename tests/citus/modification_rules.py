"""Citus's rules for a statement that modifies a distributed table, checked on plain
PostgreSQL with PostgreSQL's own analysis of each statement (docs/scaling.md).

Citus's router planner (``ModifyQuerySupported`` and ``MasterIrreducibleExpression`` in
``planner/multi_router_planner.c``) refuses, in an UPDATE, a DELETE or an INSERT's ``ON
CONFLICT DO UPDATE`` of a distributed table:

- a STABLE function or operator applied to a column, in the SET list or the WHERE clause
  ("STABLE functions used in UPDATE queries cannot be called with column references"): it
  evaluates STABLE calls once, on the node that plans, and a column is known only on the
  shard. A ``timestamptz + interval`` over a column counts (the operator is STABLE);
- a CASE or COALESCE that holds any function that is not IMMUTABLE, there;
- any function that is not IMMUTABLE in RETURNING.

Which function or operator an expression calls depends on its arguments' types, which the
parser alone does not know. So each such statement of a PL/pgSQL body becomes a query over the
same tables, with the body's variables as columns of a row of typed NULLs beside them, made a
temporary view; PostgreSQL resolves every function and operator, and the view's stored query
tree (``pg_rewrite.ev_action``) names each one by OID and each column it reads. The walk over
that tree is Citus's. A variable counts as a constant, as PL/pgSQL passes it (a parameter),
not as a column.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pglast
import psycopg
from pglast import ast
from pglast.stream import RawStream

from tests.citus.sql_rules import SCHEMA, Function, Violation, _find, parsed_body, unparsed

# The alias of the row of the body's variables (and of its rows' and records' fields).
_VARIABLES = "pk_plpgsql_variables"

Node = dict[str, Any]


@dataclass(frozen=True)
class Catalog:
    """What the walk needs of the server's catalog."""

    volatility: dict[int, str]
    """Each function's provolatile, by OID."""
    io_functions: dict[int, tuple[int, int]]
    """Each type's input and output functions, by the type's OID."""
    operator_functions: dict[int, int]
    """Each operator's function, by the operator's OID."""
    column_types_of: dict[str, dict[str, str]]
    """Each table's (and composite type's) columns and their types, by its qualified name."""
    column_types: dict[str, set[str]]
    """The types of the queue's table columns of each name: a record's field (``v_job.id``)
    is typed as the column it was read from, when every column of that name has one type."""

    @classmethod
    def read(cls, connection: psycopg.Connection[Any]) -> Catalog:
        return cls(
            dict(connection.execute("SELECT oid::int, provolatile FROM pg_proc").fetchall()),
            {
                oid: (typinput, typoutput)
                for oid, typinput, typoutput in connection.execute(
                    "SELECT oid::int, typinput::oid::int, typoutput::oid::int FROM pg_type"
                ).fetchall()
            },
            dict(connection.execute("SELECT oid::int, oprcode::oid::int FROM pg_operator")),
            *_column_types(connection),
        )


def _field_variable(field: str) -> str:
    return "pk_" + field.replace(".", "__")


def _column_types(
    connection: psycopg.Connection[Any],
) -> tuple[dict[str, dict[str, str]], dict[str, set[str]]]:
    of: dict[str, dict[str, str]] = {}
    types: dict[str, set[str]] = {}
    for table, name, type_name in connection.execute(
        "SELECT c.oid::regclass::text, a.attname, format_type(a.atttypid, a.atttypmod) "
        "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "WHERE c.relnamespace = 'postkit_queue'::regnamespace AND c.relkind IN ('r', 'c') "
        "AND a.attnum > 0 AND NOT a.attisdropped"
    ):
        of.setdefault(table, {})[name] = type_name
        types.setdefault(name, set()).add(type_name)
    return of, types


def tokens(tree: str) -> Iterator[str]:
    """The tokens of a node tree as PostgreSQL writes it (outfuncs.c): braces and parentheses
    alone, ``<>`` for NULL, a backslash escaping the character after it."""
    token: list[str] = []
    escaped = False
    for char in tree:
        if escaped:
            token.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char.isspace() or char in "(){}":
            if token:
                yield "".join(token)
                token = []
            if not char.isspace():
                yield char
        else:
            token.append(char)
    if token:
        yield "".join(token)


def parse_node_tree(tree: str) -> Any:
    """A node tree as nested dicts (``{"node": "OPEXPR", "opfuncid": ["1189"], ...}``) and
    lists; an atom is its token."""
    stream = list(tokens(tree))
    position = 0

    def value() -> Any:
        nonlocal position
        token = stream[position]
        position += 1
        if token == "(":
            items = []
            while stream[position] != ")":
                items.append(value())
            position += 1
            return items
        if token == "{":
            node: Node = {"node": stream[position]}
            position += 1
            while stream[position] != "}":
                key = stream[position][1:]
                position += 1
                values = []
                while stream[position] != "}" and not stream[position].startswith(":"):
                    values.append(value())
                node[key] = values
            position += 1
            return node
        return token

    return value()


def _children(node: Any, *, into_subqueries: bool = False) -> Iterator[Any]:
    """What a walk visits below ``node``: Citus's walker stops at a subquery (a statement of
    its own), PostgreSQL's contain_mutable_functions goes into it."""
    if isinstance(node, list):
        yield from node
    elif isinstance(node, dict):
        for key, values in node.items():
            if key == "node" or (
                node["node"] == "SUBLINK" and key == "subselect" and not into_subqueries
            ):
                continue
            yield from values


# The field that holds the type an expression node yields, for the node kinds that name it.
_RESULT_TYPES = {
    "VAR": "vartype",
    "CONST": "consttype",
    "PARAM": "paramtype",
    "FUNCEXPR": "funcresulttype",
    "OPEXPR": "opresulttype",
    "NULLIFEXPR": "opresulttype",
    "RELABELTYPE": "resulttype",
    "COERCEVIAIO": "resulttype",
    "ARRAYCOERCEEXPR": "resulttype",
    "FIELDSELECT": "resulttype",
    "COALESCEEXPR": "coalescetype",
    "CASEEXPR": "casetype",
    "MINMAXEXPR": "minmaxtype",
    "AGGREF": "aggtype",
    "WINDOWFUNC": "wintype",
    "ROWEXPR": "row_typeid",
    "ARRAYEXPR": "array_typeid",
    "COERCETODOMAIN": "resulttype",
}
_BOOLEAN = 16
_YIELDS_BOOLEAN = {
    "BOOLEXPR",
    "SCALARARRAYOPEXPR",
    "NULLTEST",
    "BOOLEANTEST",
    "DISTINCTEXPR",
    "ROWCOMPAREEXPR",
}


def _result_type(node: Any) -> int | None:
    """The type ``node`` yields, or None where the tree does not say (a subquery's)."""
    if not isinstance(node, dict):
        return None
    if node["node"] in _YIELDS_BOOLEAN:
        return _BOOLEAN
    field_name = _RESULT_TYPES.get(node["node"])
    return _first(node, field_name) if field_name else None


def _first(node: Node, key: str) -> int:
    return int(node[key][0])


@dataclass
class _Walk:
    """Citus's MasterIrreducibleExpressionWalker over one expression."""

    catalog: Catalog
    columns: set[int]
    """The range-table indexes that are tables (not the variables' rows)."""
    contains_column: bool = False
    column_argument: list[str] = field(default_factory=list)
    bad_case_or_coalesce: list[str] = field(default_factory=list)

    def own_volatility(self, node: Node) -> str:
        """The volatility of the functions this node itself calls (check_functions_in_node):
        'i', 's' or 'v'."""
        functions: list[int] = []
        kind = node["node"]
        if kind == "FUNCEXPR":
            functions.append(_first(node, "funcid"))
        elif kind in ("OPEXPR", "DISTINCTEXPR", "NULLIFEXPR", "SCALARARRAYOPEXPR"):
            functions.append(_first(node, "opfuncid"))
        elif kind == "AGGREF":
            functions.append(_first(node, "aggfnoid"))
        elif kind == "WINDOWFUNC":
            functions.append(_first(node, "winfnoid"))
        elif kind == "ROWCOMPAREEXPR":
            opnos = node["opnos"][0] if node["opnos"] else []
            functions.extend(self.catalog.operator_functions[int(o)] for o in opnos[1:])
        elif kind == "COERCEVIAIO":
            # The argument's output function and the result's input function.
            functions.append(self.catalog.io_functions[_first(node, "resulttype")][0])
            argument_type = _result_type(node["arg"][0])
            if argument_type is None:
                return "s"  # an output function this walk cannot name: not IMMUTABLE, to be safe
            functions.append(self.catalog.io_functions[argument_type][1])
        elif kind in ("SQLVALUEFUNCTION", "NEXTVALUEEXPR"):
            return "s" if kind == "SQLVALUEFUNCTION" else "v"
        flags = {self.catalog.volatility[f] for f in functions}
        return "v" if "v" in flags else "s" if "s" in flags else "i"

    def mutable(self, node: Any) -> bool:
        """contain_mutable_functions: anything below that is not IMMUTABLE, subqueries
        included."""
        if isinstance(node, dict) and "node" in node and self.own_volatility(node) != "i":
            return True
        return any(self.mutable(child) for child in _children(node, into_subqueries=True))

    def walk(self, node: Any, where: str) -> None:
        if isinstance(node, list):
            for item in node:
                self.walk(item, where)
            return
        if not isinstance(node, dict):
            return
        kind = node["node"]
        if kind in ("COALESCEEXPR", "CASEEXPR"):
            if self.mutable(node):
                self.bad_case_or_coalesce.append(where)
            return
        if kind == "VAR":
            if _first(node, "varno") in self.columns and _first(node, "varlevelsup") == 0:
                self.contains_column = True
            return
        if self.own_volatility(node) == "s":
            inner = _Walk(self.catalog, self.columns)
            for child in _children(node):
                inner.walk(child, where)
            if inner.contains_column:
                self.column_argument.append(where)
            self.column_argument.extend(inner.column_argument)
            self.bad_case_or_coalesce.extend(inner.bad_case_or_coalesce)
            return
        for child in _children(node):
            self.walk(child, where)


@dataclass(frozen=True)
class Modification:
    """One modifying statement of a body, as the parts Citus checks."""

    sql: str
    relation: str
    """The table modified, as written (``postkit_queue.jobs j``)."""
    tables: list[str]
    """Every FROM item beside it (UPDATE ... FROM, DELETE ... USING, ``excluded``)."""
    checked: list[tuple[str, str]]
    """(where, expression) that must hold no STABLE call over a column, nor a CASE or COALESCE
    over one that is not IMMUTABLE (an UPDATE's SET list, the WHERE clause)."""
    immutable: list[tuple[str, str]]
    """(where, expression) that must hold nothing that is not IMMUTABLE, over columns or not:
    RETURNING, ON CONFLICT's SET (unless a bare column), its WHERE and its arbiter's WHERE."""
    unchecked: list[str]
    """What the walk cannot analyze (``SET (a, b) = ...``), reported as such."""


def _deparse(node: Any) -> str:
    return str(RawStream()(node))


def _relation(range_var: ast.RangeVar) -> str:
    return _deparse(range_var)


def modifications(sql: str, sharded: frozenset[str]) -> Iterator[Modification]:
    """The UPDATEs, DELETEs and ``INSERT ... ON CONFLICT DO UPDATE``s of sharded tables in one
    statement's SQL."""

    def sharded_table(range_var: ast.RangeVar) -> bool:
        return range_var.schemaname == SCHEMA and range_var.relname in sharded

    for raw in pglast.parse_sql(sql):
        for node in _ast_nodes(raw.stmt):
            if isinstance(node, ast.UpdateStmt) and sharded_table(node.relation):
                targets = list(node.targetList or ())
                checked = [
                    (f"SET {t.name}", _deparse(t.val))
                    for t in targets
                    if not isinstance(t.val, ast.MultiAssignRef)
                ]
                if node.whereClause is not None:
                    checked.append(("WHERE", _deparse(node.whereClause)))
                yield Modification(
                    sql,
                    _relation(node.relation),
                    [_deparse(item) for item in node.fromClause or ()],
                    checked,
                    _returning(node),
                    [
                        f"SET ({t.name}, ...) = ..."
                        for t in targets
                        if isinstance(t.val, ast.MultiAssignRef)
                    ],
                )
            elif isinstance(node, ast.DeleteStmt) and sharded_table(node.relation):
                yield Modification(
                    sql,
                    _relation(node.relation),
                    [_deparse(item) for item in node.usingClause or ()],
                    [("WHERE", _deparse(node.whereClause))] if node.whereClause else [],
                    _returning(node),
                    [],
                )
            elif isinstance(node, ast.InsertStmt) and sharded_table(node.relation):
                conflict = node.onConflictClause
                arbiter = conflict.infer.whereClause if conflict and conflict.infer else None
                if arbiter is not None:
                    # The arbiter's columns are the table's: no excluded row beside it.
                    where = [("ON CONFLICT's arbiter WHERE", _deparse(arbiter))]
                    yield Modification(sql, _relation(node.relation), [], [], where, [])
                immutable: list[tuple[str, str]] = []
                updates = (
                    conflict is not None
                    and conflict.action == pglast.enums.OnConflictAction.ONCONFLICT_UPDATE
                )
                if updates:
                    # A bare column passes whatever its type (Citus: "DO UPDATE SET col_1
                    # = table.col_1").
                    immutable += [
                        (f"ON CONFLICT SET {t.name}", _deparse(t.val))
                        for t in conflict.targetList or ()
                        if not isinstance(t.val, ast.ColumnRef)
                    ]
                    if conflict.whereClause is not None:
                        immutable.append(("ON CONFLICT WHERE", _deparse(conflict.whereClause)))
                table = f"{SCHEMA}.{node.relation.relname}"
                if immutable or node.returningClause:
                    yield Modification(
                        sql,
                        _relation(node.relation),
                        [f"{table} AS excluded"] if updates else [],
                        [],
                        immutable + _returning(node),
                        [],
                    )


def _returning(statement: Any) -> list[tuple[str, str]]:
    """RETURNING's list as one part (its expressions may name one another's columns)."""
    clause = statement.returningClause
    if clause is None:
        return []
    return [("RETURNING", ", ".join(_deparse(target.val) for target in clause.exprs))]


def _ast_nodes(node: Any) -> Iterator[Any]:
    if isinstance(node, ast.Node):
        yield node
        for name in node:
            yield from _ast_nodes(getattr(node, name))
    elif isinstance(node, tuple):
        for item in node:
            yield from _ast_nodes(item)


def _variables(tree: Any) -> tuple[dict[str, str], dict[str, str], set[str]]:
    """The body's variables: scalars and their types, %ROWTYPE rows and their tables, and the
    names of records (whose fields have no type until run)."""
    scalars: dict[str, str] = {}
    rows: dict[str, str] = {}
    for datum in _find(tree, "PLpgSQL_var"):
        type_name = unparsed(datum["datatype"]["PLpgSQL_type"]["typname"])
        if type_name.lower().endswith("%rowtype"):
            rows[datum["refname"]] = type_name[: -len("%rowtype")]
        else:
            scalars[datum["refname"]] = type_name
    records = {datum["refname"] for datum in _find(tree, "PLpgSQL_rec")}
    return scalars, rows, records


def _statements(tree: Any) -> Iterator[str]:
    for expression in _find(tree, "PLpgSQL_expr"):
        if expression.get("parseMode", 0) == 0:
            yield unparsed(expression["query"])


def modification_violations(
    connection: psycopg.Connection[Any],
    catalog: Catalog,
    function: Function,
    sharded: frozenset[str],
) -> list[Violation]:
    """Every modification in ``function``'s PL/pgSQL body that Citus would refuse."""
    tree = parsed_body(function.definition)
    scalars, rows, records = _variables(tree)
    found: list[Violation] = []
    for statement in _statements(tree):
        for modification in modifications(statement, sharded):
            found.extend(
                _check(connection, catalog, function, modification, scalars, rows, records)
            )
    return found


def _check(
    connection: psycopg.Connection[Any],
    catalog: Catalog,
    function: Function,
    modification: Modification,
    scalars: dict[str, str],
    rows: dict[str, str],
    records: set[str],
) -> list[Violation]:
    def violation(detail: str) -> Violation:
        return Violation(function.name, "modification", modification.sql, detail)

    # A row's or a record's field becomes a variable of its own (v_job.id: pk_v_job__id), so
    # that no name of the helper row can clash with a column the statement names unqualified.
    fields: dict[str, str] = {}
    for row in sorted({*rows, *records}):
        for name in sorted(set(re.findall(rf"\b{re.escape(row)}\.(\w+)", modification.sql))):
            types = (
                {catalog.column_types_of.get(rows[row], {}).get(name, "")} - {""}
                if row in rows
                else catalog.column_types.get(name, set())
            )
            if len(types) != 1:
                return [violation(f"reads {row}.{name}, a field of no one known type")]
            fields[f"{row}.{name}"] = min(types)
    typed = {**scalars, **{_field_variable(f): t for f, t in fields.items()}}
    variables = ", ".join(f"NULL::{type_name} AS {name}" for name, type_name in typed.items())
    from_items = [modification.relation, *modification.tables]
    from_items.append(f"(SELECT {variables}) AS {_VARIABLES}")

    def typed_fields(expression: str) -> str:
        for name in sorted(fields, key=len, reverse=True):
            expression = re.sub(rf"\b{re.escape(name)}\b", _field_variable(name), expression)
        return expression

    found = [violation(f"not analyzed: {what}") for what in modification.unchecked]
    parts = [("checked", where, expression) for where, expression in modification.checked]
    parts += [("immutable", where, expression) for where, expression in modification.immutable]
    for part, where, expression in parts:
        tree = _analyzed(connection, typed_fields(expression), from_items)
        entries = {i + 1: rte for i, rte in enumerate(tree["rtable"][0] if tree["rtable"] else [])}
        columns = {
            index
            for index, rte in entries.items()
            if rte["eref"][0]["aliasname"][0] not in {_VARIABLES, "old", "new"}
        }
        expressions = [entry["expr"] for entry in tree["targetList"][0]]
        walk = _Walk(catalog, columns)
        if part == "immutable":
            if walk.mutable(expressions):
                found.append(
                    violation(f"a function that is not IMMUTABLE in {where}: {expression}")
                )
            continue
        walk.walk(expressions, where)
        if walk.column_argument:
            found.append(violation(f"a STABLE function over a column in {where}: {expression}"))
        if walk.bad_case_or_coalesce:
            found.append(
                violation(
                    f"CASE or COALESCE over a function that is not IMMUTABLE in {where}: "
                    f"{expression}"
                )
            )
    return found


def _analyzed(connection: psycopg.Connection[Any], expression: str, from_items: list[str]) -> Node:
    """The query tree PostgreSQL makes of ``SELECT expression FROM from_items``."""
    with connection.transaction(force_rollback=True):
        connection.execute(
            f"CREATE TEMPORARY VIEW pk_modification_probe AS SELECT {expression} "
            f"FROM {', '.join(from_items)}"
        )
        (tree,) = connection.execute(
            "SELECT ev_action FROM pg_rewrite WHERE ev_class = 'pk_modification_probe'::regclass"
        ).fetchone() or (None,)
    (query,) = parse_node_tree(str(tree))
    return query  # type: ignore[no-any-return]


__all__ = ["Catalog", "modification_violations", "modifications", "parse_node_tree"]

"""The rules that make the SQL module run on Citus, checked by PostgreSQL's own parser.

Citus shards the queue's tables by ``namespace`` (docs/scaling.md) and delegates each SDK call,
``SELECT ... FROM postkit_queue.f(namespace, ...)``, to the node that owns the namespace. Inside
the delegated body, every statement goes through Citus's planner again, and only some shapes
survive it (citusdata/citus, ``planner/fast_path_router_planner.c`` and
``multi_router_planner.c``):

- ``namespace``: each statement that reads or writes a sharded table names the namespace it was
  given, once, as a top-level ``namespace = p_namespace`` of its WHERE (or, for an INSERT, as
  the value of its namespace column); otherwise Citus cannot route it to one shard.
- ``fast-path``: a function planned generically (``plan_cache_mode = force_generic_plan``)
  sees its namespace only as an unbound parameter, which Citus routes only for fast-path
  statements: one table, no CTE, no subquery, no set operation, no set-returning function in
  the select list, no ``INSERT ... SELECT``.
- ``volatile``: no volatile function inside an UPDATE or DELETE (Citus refuses them on
  distributed tables).
- ``whole-row``: no row of a table, or a row variable, passed whole to a function (Citus
  deparses it with the shard's row type); pass its columns.
- ``notify``: notifications only through the one helper, ``postkit_queue.send_notification``,
  so that where they are raised is decided in one place.
- ``dynamic``: no dynamic SQL (``EXECUTE``) in a function that takes a namespace: nothing here
  could check it.

The checker reads a function's definition as ``pg_get_functiondef`` prints it and returns the
statements that break a rule. It knows nothing of the schema beyond what :class:`Schema` tells
it, so the rules' own tests can show it statements that break each one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pglast
from pglast.parser import parse_sql_json

SCHEMA = "postkit_queue"
# libpg_query's PL/pgSQL parser resolves only pg_catalog and public in declarations such as
# ``v_job postkit_queue.jobs``: the checker parses the text with the schema renamed to this,
# and reads any relation or function in it as the queue's.
_PARSED_SCHEMA = "public"
NOTIFY_HELPER = "send_notification"

Node = dict[str, Any]


@dataclass(frozen=True)
class Schema:
    """What the checker needs to know of the installed schema."""

    sharded_tables: frozenset[str]
    """Tables with a namespace column, distributed by it."""
    volatile_functions: frozenset[tuple[str, str]]
    """(schema, name) of every volatile function the bodies could call."""
    set_returning_functions: frozenset[tuple[str, str]]


@dataclass(frozen=True)
class Violation:
    function: str
    rule: str
    statement: str
    detail: str

    def __str__(self) -> str:
        statement = " ".join(self.statement.split())
        return f"{self.function}: {self.rule}: {self.detail}\n    {statement[:300]}"


@dataclass(frozen=True)
class Function:
    """A function's definition as the checker reads it."""

    name: str
    definition: str
    """``pg_get_functiondef``'s text."""
    namespace_parameter: str | None
    """The name of its first parameter when that is the namespace (``p_namespace``)."""
    generic_plan: bool


def violations(function: Function, schema: Schema) -> list[Violation]:
    """Every statement of ``function``'s body that breaks a rule."""
    text = function.definition.replace(f"{SCHEMA}.", f"{_PARSED_SCHEMA}.")
    # Arrays of rows are row variables too (record_outcomes(v_done, ...) passes rows whole).
    row_arrays = set(re.findall(r"\b(\w+)\s+(?:record|public\.\w+)\[\]", text, re.IGNORECASE))
    if not re.search(r"\bLANGUAGE\s+plpgsql\b", text, re.IGNORECASE):
        raise ValueError(f"{function.name} is not PL/pgSQL")
    tree = parsed_body(function.definition)
    records = {rec["refname"] for rec in _find(tree, "PLpgSQL_rec")} | row_arrays
    found: list[Violation] = []
    if function.namespace_parameter is not None:
        # EXECUTE, FOR ... IN EXECUTE, OPEN ... FOR EXECUTE and RETURN QUERY EXECUTE.
        for kind, field in _DYNAMIC_STATEMENTS:
            for dynamic in _find(tree, kind):
                if field in dynamic:
                    found.append(
                        Violation(
                            function.name,
                            "dynamic",
                            dynamic[field]["PLpgSQL_expr"]["query"],
                            "dynamic SQL in a function that takes a namespace",
                        )
                    )
    for expression in _find(tree, "PLpgSQL_expr"):
        sql = _as_statement(expression["query"], expression.get("parseMode", 0))
        for statement in json.loads(parse_sql_json(sql))["stmts"]:
            checker = _StatementChecker(function, schema, records, sql)
            checker.check(statement["stmt"])
            found.extend(checker.found)
    return found


def parsed_body(definition: str) -> Any:
    """A PL/pgSQL function's ``pg_get_functiondef`` as libpg_query's parser takes it: the
    queue's schema renamed (see ``_PARSED_SCHEMA``; :func:`unparsed` names it again), and arrays
    of records declared as text[], which it does not take either (no rule needs their type)."""
    text = definition.replace(f"{SCHEMA}.", f"{_PARSED_SCHEMA}.")
    text = re.sub(r"\b(record|public\.\w+)\[\]", "text[]", text, flags=re.IGNORECASE)
    return pglast.parse_plpgsql(text)


def unparsed(sql: str) -> str:
    """SQL taken from :func:`parsed_body`'s tree, naming the queue's schema again."""
    return sql.replace(f"{_PARSED_SCHEMA}.", f"{SCHEMA}.")


_DYNAMIC_STATEMENTS = (
    ("PLpgSQL_stmt_dynexecute", "query"),
    ("PLpgSQL_stmt_dynfors", "query"),
    ("PLpgSQL_stmt_open", "dynquery"),
    ("PLpgSQL_stmt_return_query", "dynquery"),
)


def _as_statement(query: str, mode: int) -> str:
    """The SQL of one PL/pgSQL expression as a statement the SQL parser takes."""
    if mode == 0:
        return query
    if mode == 2:
        return f"SELECT {query}"
    # An assignment (modes 3-5): "target := expression" or "target = expression", the target
    # a variable, a field or an element (v_ids[cardinality(v_ids) + 1]).
    if ":=" in query:
        target, expression = query.split(":=", 1)
    else:
        assigned = re.match(r"\s*[\w\".]+\s*=", query)
        if assigned is None:
            raise ValueError(f"not an assignment: {query}")
        target, expression = query[: assigned.end() - 1], query[assigned.end() :]
    return f"SELECT {expression}, {target.strip()}" if "[" in target else f"SELECT {expression}"


def _find(node: Any, kind: str) -> Iterator[Node]:
    """Every node of ``kind`` under ``node`` (a parse tree as JSON), outermost first."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == kind:
                yield value
            yield from _find(value, kind)
    elif isinstance(node, list):
        for item in node:
            yield from _find(item, kind)


def _find_outside_subqueries(node: Any, kind: str) -> Iterator[Node]:
    """As :func:`_find`, without descending into a subquery (a statement of its own)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "SubLink":
                continue
            if key == kind:
                yield value
            yield from _find_outside_subqueries(value, kind)
    elif isinstance(node, list):
        for item in node:
            yield from _find_outside_subqueries(item, kind)


def _relations(statement: Node) -> Iterator[Node]:
    """Every table a statement names: the FROM items, and the target of each UPDATE, DELETE
    and INSERT (a field of its own in the parse tree, not a node of the FROM)."""
    yield from _find(statement, "RangeVar")
    for kind in ("UpdateStmt", "DeleteStmt", "InsertStmt"):
        for node in _find(statement, kind):
            yield node["relation"]


def _names(items: list[Node]) -> list[str]:
    return [item["String"]["sval"] if "String" in item else "*" for item in items]


def _function_name(call: Node) -> tuple[str, str]:
    parts = _names(call["funcname"])
    schema = parts[0] if len(parts) > 1 else "pg_catalog"
    return (SCHEMA if schema == _PARSED_SCHEMA else schema, parts[-1])


def _conjuncts(where: Node | None) -> list[Node]:
    """The top-level AND terms of a condition."""
    if where is None:
        return []
    boolean = where.get("BoolExpr")
    if boolean is not None and boolean["boolop"] == "AND_EXPR":
        return [term for arg in boolean["args"] for term in _conjuncts(arg)]
    return [where]


class _StatementChecker:
    def __init__(self, function: Function, schema: Schema, records: set[str], sql: str) -> None:
        self.function = function
        self.schema = schema
        self.records = records
        self.sql = sql
        self.found: list[Violation] = []

    def violation(self, rule: str, detail: str) -> None:
        self.found.append(Violation(self.function.name, rule, self.sql, detail))

    def sharded(self, relation: Node) -> bool:
        return (
            relation.get("schemaname") == _PARSED_SCHEMA
            and relation["relname"] in self.schema.sharded_tables
        )

    def check(self, statement: Node) -> None:
        tables = [relation for relation in _relations(statement) if self.sharded(relation)]
        if tables and self.function.namespace_parameter is not None:
            for level in self.levels(statement):
                self.check_namespace(level)
            if self.function.generic_plan:
                self.check_fast_path(statement)
        self.check_volatile(statement)
        self.check_whole_rows(statement)
        self.check_notify(statement)

    # -- namespace ------------------------------------------------------------------------

    def levels(self, node: Any) -> Iterator[tuple[str, Node]]:
        """Each SELECT, UPDATE, DELETE and INSERT in the statement, nested ones included."""
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("SelectStmt", "UpdateStmt", "DeleteStmt", "InsertStmt"):
                    yield key, value
                yield from self.levels(value)
        elif isinstance(node, list):
            for item in node:
                yield from self.levels(item)

    def check_namespace(self, level: tuple[str, Node]) -> None:
        kind, node = level
        if kind == "UpdateStmt" and self.sharded(node["relation"]):
            for target in node.get("targetList", []):
                if target["ResTarget"].get("name") == "namespace":
                    self.violation(
                        "namespace",
                        f"an UPDATE of {node['relation']['relname']} moves rows to another "
                        "namespace",
                    )
        if kind == "InsertStmt":
            if self.sharded(node["relation"]):
                self.check_inserted_namespace(node)
            return
        relations: list[Node] = []
        conditions: list[Node] = []
        if kind in ("UpdateStmt", "DeleteStmt"):
            relations.append(node["relation"])
        for item in node.get("fromClause", []) + node.get("usingClause", []):
            self.from_item(item, relations, conditions)
        where = node.get("whereClause")
        terms = _conjuncts(where) + [t for c in conditions for t in _conjuncts(c)]
        for relation in relations:
            if not self.sharded(relation):
                continue
            name = relation.get("alias", {}).get("aliasname", relation["relname"])
            mentions = sum(
                1
                for condition in [where, *conditions]
                for column in _find_outside_subqueries(condition, "ColumnRef")
                if self.names_namespace(column, name, len(relations))
            )
            filtered = any(self.namespace_filter(term, name, len(relations)) for term in terms)
            if not filtered:
                self.violation(
                    "namespace",
                    f"{relation['relname']} is read or written without a top-level "
                    f"namespace = {self.function.namespace_parameter}",
                )
            elif mentions != 1:
                self.violation(
                    "namespace",
                    f"{relation['relname']}'s namespace appears {mentions} times in the condition",
                )

    def from_item(self, item: Node, relations: list[Node], conditions: list[Node]) -> None:
        if "RangeVar" in item:
            relations.append(item["RangeVar"])
        elif "JoinExpr" in item:
            join = item["JoinExpr"]
            self.from_item(join["larg"], relations, conditions)
            self.from_item(join["rarg"], relations, conditions)
            if join.get("quals") is not None:
                conditions.append(join["quals"])

    def names_namespace(self, column: Node, table: str, tables: int) -> bool:
        fields = _names(column["fields"])
        return fields == [table, "namespace"] or (fields == ["namespace"] and tables == 1)

    def is_namespace_argument(self, node: Node) -> bool:
        column = node.get("ColumnRef")
        return column is not None and _names(column["fields"]) == [
            self.function.namespace_parameter
        ]

    def namespace_filter(self, term: Node, table: str, tables: int) -> bool:
        expression = term.get("A_Expr")
        if expression is None or expression["kind"] != "AEXPR_OP":
            return False
        if _names(expression["name"])[-1] != "=":
            return False
        sides = (expression["lexpr"], expression["rexpr"])
        for column, value in (sides, sides[::-1]):
            if (
                "ColumnRef" in column
                and self.names_namespace(column["ColumnRef"], table, tables)
                and self.is_namespace_argument(value)
            ):
                return True
        return False

    def check_inserted_namespace(self, insert: Node) -> None:
        columns = [target["ResTarget"]["name"] for target in insert.get("cols", [])]
        table = insert["relation"]["relname"]
        if "namespace" not in columns:
            self.violation("namespace", f"an INSERT into {table} names no namespace column")
            return
        position = columns.index("namespace")
        select = insert.get("selectStmt", {}).get("SelectStmt", {})
        rows = [row["List"]["items"] for row in select.get("valuesLists", [])]
        if not rows:
            targets = select.get("targetList", [])
            rows = [[target["ResTarget"]["val"] for target in targets]] if targets else []
        if not rows or not all(self.is_namespace_argument(row[position]) for row in rows):
            self.violation(
                "namespace",
                f"an INSERT into {table} whose namespace is not "
                f"{self.function.namespace_parameter}",
            )

    # -- fast-path ------------------------------------------------------------------------

    def check_fast_path(self, statement: Node) -> None:
        kind, node = next(iter(statement.items()))
        if node.get("withClause") is not None:
            self.violation("fast-path", "a CTE (WITH) in a generically planned function")
        if any(True for _ in _find(statement, "SubLink")):
            self.violation("fast-path", "a subquery in a generically planned function")
        if kind == "SelectStmt":
            if node.get("op", "SETOP_NONE") != "SETOP_NONE":
                self.violation("fast-path", "a set operation in a generically planned function")
            items = node.get("fromClause", [])
            if len(items) != 1 or "RangeVar" not in items[0]:
                self.violation(
                    "fast-path", "a FROM other than one table in a generically planned function"
                )
            for target in node.get("targetList", []):
                for call in _find(target, "FuncCall"):
                    if _function_name(call) in self.schema.set_returning_functions:
                        self.violation(
                            "fast-path",
                            f"a set-returning {'.'.join(_function_name(call))} in the select "
                            "list of a generically planned function",
                        )
        elif kind == "UpdateStmt" and node.get("fromClause"):
            self.violation("fast-path", "UPDATE ... FROM in a generically planned function")
        elif kind == "DeleteStmt" and node.get("usingClause"):
            self.violation("fast-path", "DELETE ... USING in a generically planned function")
        elif kind == "InsertStmt":
            select = node.get("selectStmt", {}).get("SelectStmt")
            if select is not None and not select.get("valuesLists"):
                self.violation("fast-path", "INSERT ... SELECT in a generically planned function")

    # -- volatile, whole-row, notify ------------------------------------------------------

    def check_volatile(self, statement: Node) -> None:
        for kind in ("UpdateStmt", "DeleteStmt"):
            for node in _find(statement, kind):
                for call in _find(node, "FuncCall"):
                    name = _function_name(call)
                    if name in self.schema.volatile_functions:
                        self.violation(
                            "volatile", f"the volatile {'.'.join(name)}() inside an {kind[:6]}"
                        )

    def check_whole_rows(self, statement: Node) -> None:
        tables = {
            name
            for relation in _relations(statement)
            for name in (relation["relname"], relation.get("alias", {}).get("aliasname"))
            if name
        }
        for call in _find(statement, "FuncCall"):
            if _function_name(call)[0] == "pg_catalog":
                continue  # built-ins take any row type: no shard's row type can mismatch
            for argument in call.get("args", []):
                for column in self.whole_row_arguments(argument):
                    fields = _names(column["fields"])
                    if fields[-1] == "*" or (
                        len(fields) == 1 and fields[0] in tables | self.records
                    ):
                        self.violation(
                            "whole-row",
                            f"{'.'.join(fields)} passed whole to "
                            f"{'.'.join(_function_name(call))}()",
                        )

    def whole_row_arguments(self, argument: Node) -> Iterator[Node]:
        """The column references an argument is built from: itself, or those anywhere in the
        expression (an ARRAY[...], a cast, a ROW(...), a named argument, a built-in's
        arguments such as array_agg(j)), short of a subquery, which is a statement of its
        own."""
        if "ColumnRef" in argument:
            yield argument["ColumnRef"]
            return
        if "SubLink" in argument:
            return
        for value in argument.values():
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, dict):
                    yield from self.whole_row_arguments(item)

    def check_notify(self, statement: Node) -> None:
        if self.function.name == NOTIFY_HELPER:
            return
        if "NotifyStmt" in statement:
            self.violation("notify", f"NOTIFY outside postkit_queue.{NOTIFY_HELPER}")
        for call in _find(statement, "FuncCall"):
            if _function_name(call) == ("pg_catalog", "pg_notify"):
                self.violation("notify", f"pg_notify() outside postkit_queue.{NOTIFY_HELPER}")


def called_functions(definition: str) -> set[str]:
    """The names of the queue's functions a PL/pgSQL body calls."""
    called: set[str] = set()
    for expression in _find(parsed_body(definition), "PLpgSQL_expr"):
        sql = _as_statement(expression["query"], expression.get("parseMode", 0))
        for call in _find(json.loads(parse_sql_json(sql)), "FuncCall"):
            schema, name = _function_name(call)
            if schema == SCHEMA:
                called.add(name)
    return called


def planned_generically(
    own_mode: dict[str, str | None], calls: dict[str, set[str]]
) -> frozenset[str]:
    """The functions whose statements are planned generically: those that set
    ``plan_cache_mode = force_generic_plan``, and those without a setting of their own that
    such a function calls, directly or through others (a function's SET clause holds for
    everything it calls)."""
    generic = {name for name, mode in own_mode.items() if mode == "force_generic_plan"}
    frontier = list(generic)
    while frontier:
        caller = frontier.pop()
        for callee in calls.get(caller, set()):
            if callee not in generic and own_mode.get(callee, "") is None:
                generic.add(callee)
                frontier.append(callee)
    return frozenset(generic)

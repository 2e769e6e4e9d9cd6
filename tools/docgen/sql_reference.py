"""docs/sql.md: every function of the current schema, file by file.

Each public function gets its signature, the comment block above it, where it is defined,
what it locks and what it raises; the helpers clients do not call are listed briefly, at the
end.
"""

from __future__ import annotations

import re

from docgen import GENERATED
from docgen.markdown import anchor, first_sentence, paragraphs
from docgen.sql_effects import locks_of, raises_of
from docgen.sql_schema import SQL_DIR, SqlFunction, comment_blocks, parse_sql, split_top_level
from postkit.queue.schema import api_access

# Helpers of the SQL module that clients do not call: listed briefly, at the end.
INTERNAL_SQL = {
    "bury",
    "clock",
    "error_entry",
    "holds_claim",
    "is_name",
    "my_namespaces",
    "notify",
    "on_citus",
    "on_citus_coordinator",
    "queue_policy",
    "record_outcome",
    "record_outcomes",
    "refuse_roles_on_citus",
    "require_operator",
    "set_paused",
    "policy_caller",
    "tenant_access",
    "tenant_isolation_on",
    "tenant_policy",
    "write_tenant_access",
}


def _signature(function: SqlFunction) -> str:
    arguments = "".join(f"\n    {arg}," for arg in function.arguments).rstrip(",")
    returns = function.returns
    table = re.fullmatch(r"TABLE \((.*)\)", returns)
    if table and len(returns) > 60:
        columns = split_top_level(table.group(1))
        returns = "TABLE (" + "".join(f"\n    {column}," for column in columns)[:-1] + "\n)"
    close = "\n)" if function.arguments else ")"
    return f"postkit_queue.{function.name}({arguments}{close}\nRETURNS {returns}"


def _where(function: SqlFunction) -> str:
    return f"`sql/schema/{function.defined_in}`"


def render_sql() -> str:
    functions, titles = parse_sql()
    public = {name: f for name, f in functions.items() if not _is_internal(name)}
    access = api_access()
    out = [
        GENERATED,
        "",
        "# The SQL module: `postkit_queue`",
        "",
        "Every queue operation is one SQL function in the `postkit_queue` schema, so a client in",
        "any language gets the same rules, checks and locks. Each takes the namespace first,",
        "validates its arguments before it writes, and raises errors with SQLSTATEs of the class",
        "`PKQ` (the Python SDK raises the `postkit.errors` exception named beside each code; see",
        "[sdk.md](sdk.md#errors)). The API functions run as the schema's owner and check the",
        "caller's access kind and namespaces (`security.sql`): *Who may call it* names the",
        "least access kind granted its EXECUTE (`postkit grant ROLE producer|worker|operator`;",
        "each kind includes the ones before it), as the line `-- access: KIND` above the",
        "function's `CREATE FUNCTION` says. The others are the schema's own.",
        "",
        "*Locks* lists what the statements of the function (and of the functions it calls) lock",
        "or write: `FOR UPDATE [SKIP LOCKED]`, `UPDATE`, `DELETE`, `INSERT`, DDL and",
        "notifications; *on some paths* marks a statement inside an `IF` (here or around the",
        "call), though a statement after an early `RETURN` may be skipped too. *Raises* lists",
        "every SQLSTATE its body and its callees can raise. Both are read from the function",
        "bodies by `tools/gen_docs.py`, so they stay true as the SQL changes.",
        "",
        "## Lifecycle of a job",
        "",
        "```text",
        *_lifecycle(),
        "```",
        "",
        "## Contents",
        "",
    ]
    by_file: dict[str, list[SqlFunction]] = {}
    for function in public.values():
        by_file.setdefault(function.defined_in, []).append(function)
    for file_name, members in by_file.items():
        out.append(f"- {_file_title(file_name, titles)}")
        out.append(
            "  " + ", ".join(f"[`{f.name}`](#{anchor('postkit_queue.' + f.name)})" for f in members)
        )
    out.append("- [Internal helpers](#internal-helpers)")
    for file_name, members in by_file.items():
        out += ["", f"## {_file_title(file_name, titles)}"]
        for function in members:
            out += ["", f"### postkit_queue.{function.name}", ""]
            out += ["```sql", _signature(function), "```", ""]
            if function.comment:
                out += [paragraphs(function.comment), ""]
            locks = locks_of(function.name, functions)
            raises = raises_of(function.name, functions)
            kind = {"STABLE": " (STABLE: reads only)", "IMMUTABLE": " (IMMUTABLE)"}
            out.append(
                f"- **Defined in:** {_where(function)}; {function.language}"
                f"{kind.get(function.volatility, '')}"
            )
            who = access.get(function.name)
            out.append(
                f"- **Who may call it:** {who} and above"
                if who and who != "operator"
                else "- **Who may call it:** operator"
                if who
                else "- **Who may call it:** the schema's owner (or a superuser)"
            )
            out.append("- **Locks:**" + (" none: reads only" if not locks else ""))
            out += [f"  - {line}" for line in locks]
            out.append("- **Raises:** " + (", ".join(raises) or "none"))
    out += [
        "",
        "## Internal helpers",
        "",
        "Called by the functions above; not meant to be called by clients.",
        "",
    ]
    for name, function in functions.items():
        if not _is_internal(name):
            continue
        summary = first_sentence(" ".join(function.comment)) if function.comment else ""
        arguments = ", ".join(function.arguments)
        out.append(
            f"- `{name}({arguments})` → `{function.returns}`" + (f": {summary}" if summary else "")
        )
    return "\n".join(out) + "\n"


def _is_internal(name: str) -> bool:
    return name in INTERNAL_SQL or name.startswith("check_")


def _file_title(file_name: str, titles: dict[str, str]) -> str:
    title = titles[file_name].rstrip(".")
    return title[0].upper() + title[1:] + f" (`{file_name}`)"


def _lifecycle() -> list[str]:
    lines = (SQL_DIR / "lifecycle.sql").read_text(encoding="utf-8").splitlines()
    header = comment_blocks(lines)[0]
    start = next(i for i, line in enumerate(header) if line.endswith("Lifecycle of a job:"))
    block = header[start + 1 :]
    while block and not block[0].strip():
        block.pop(0)
    end = next(i for i, line in enumerate(block) if not line.strip())
    return [line[4:] if line.startswith("    ") else line for line in block[:end]]

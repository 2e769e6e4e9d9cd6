"""Generate the docs that come from the source: docs/sql.md, docs/sdk.md, docs/cli.md, and the
site's home page, docs/index.md, from the README.

docs/sql.md lists every function of the current schema (src/postkit/queue/sql/schema/, where
each is defined exactly once), file by file, with its signature, the comment block above it,
what it locks and what it raises. Both are read from the function bodies: "locks" from their FOR
UPDATE [SKIP LOCKED], UPDATE, DELETE, INSERT and DDL statements, "raises" from the ERRCODEs they
raise; each also counts what the postkit_queue functions it calls do. docs/sdk.md lists the
public classes and functions of the Python SDK with their signatures and docstrings, the records
it returns, and the exception hierarchy with each SQLSTATE. docs/cli.md holds every command's
--help.

    python tools/gen_docs.py          # rewrite the docs
    python tools/gen_docs.py --check  # exit 1 if a doc is out of date
"""

from __future__ import annotations

import argparse
import re
import sys

from docgen import ROOT
from docgen.cli_reference import render_cli
from docgen.index_page import render_index
from docgen.sdk_reference import render_sdk
from docgen.sql_reference import render_sql

SQL_DOC = ROOT / "docs/sql.md"
SDK_DOC = ROOT / "docs/sdk.md"
CLI_DOC = ROOT / "docs/cli.md"
INDEX = ROOT / "docs/index.md"

# The renderers import postkit when they run: the one of this tree.
sys.path.insert(0, str(ROOT / "src"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale docs")
    args = parser.parse_args()
    stale = []
    for path, render in (
        (SQL_DOC, render_sql),
        (SDK_DOC, render_sdk),
        (CLI_DOC, render_cli),
        (INDEX, render_index),
    ):
        text = re.sub(r"\n{3,}", "\n\n", render())
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(str(path.relative_to(ROOT)))
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if args.check and stale:
        print("out of date (run python tools/gen_docs.py):", ", ".join(stale))
        return 1
    if stale:
        print("wrote", ", ".join(stale))
    return 0


if __name__ == "__main__":
    sys.exit(main())

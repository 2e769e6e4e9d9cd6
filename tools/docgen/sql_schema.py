"""The functions of the current schema, read from its files.

The schema (src/postkit/queue/sql/schema/) defines each function exactly once; a function's
description is the comment block right above its ``CREATE FUNCTION``.
"""

from __future__ import annotations

import dataclasses
import re

from docgen import ROOT

SQL_DIR = ROOT / "src/postkit/queue/sql/schema"


@dataclasses.dataclass
class SqlFunction:
    """One ``CREATE FUNCTION postkit_queue.name`` of the schema. ``arguments`` leaves out the
    OUT parameters, which make up ``returns`` instead; ``comment`` is the description, one
    string per comment line; ``defined_in`` is the file's name."""

    name: str
    arguments: list[str]
    returns: str
    language: str
    volatility: str
    comment: list[str]
    body: str
    defined_in: str


_CREATE = re.compile(r"^CREATE (?:OR REPLACE )?FUNCTION postkit_queue\.(\w+)\s*\(", re.M)
_COMMENT_LINE = re.compile(r"^--(?: (.*))?$")


def _balanced(text: str, start: int) -> int:
    """The index just past the parenthesis that closes the one before ``start``."""
    depth = 1
    for index in range(start, len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                return index + 1
    raise ValueError("unbalanced parentheses")


def split_top_level(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses, each part with its spaces squeezed."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        depth += (char == "(") - (char == ")")
        current.append(char)
    parts.append("".join(current))
    return [" ".join(part.split()) for part in parts if part.strip()]


def _comment_above(lines: list[str], line_number: int) -> list[str]:
    """The contiguous ``--`` lines right above ``line_number`` (0-based), without the ``--``
    and without the function's access line (``-- access: KIND``, shown apart)."""
    block: list[str] = []
    index = line_number - 1
    if index >= 0 and lines[index].startswith("-- access: "):
        index -= 1
    while index >= 0:
        match = _COMMENT_LINE.match(lines[index])
        if match is None:
            break
        block.insert(0, match.group(1) or "")
        index -= 1
    return block


def comment_blocks(lines: list[str]) -> list[list[str]]:
    """Each run of ``--`` lines followed by another line, its lines without the ``--``, less
    the functions' access lines."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in lines:
        match = _COMMENT_LINE.match(line)
        if line.startswith("-- access: "):
            continue
        if match is not None:
            current.append(match.group(1) or "")
        elif current:
            blocks.append(current)
            current = []
    return blocks


def parse_sql() -> tuple[dict[str, SqlFunction], dict[str, str]]:
    """Every function of the schema, in the order of its files, and the title of each file.

    Raises:
        ValueError: a function is defined twice.
    """
    from postkit.queue.schema import schema_files

    functions: dict[str, SqlFunction] = {}
    titles: dict[str, str] = {}
    blocks: dict[str, list[str]] = {}
    for file_name, text in schema_files():
        path = SQL_DIR / file_name
        lines = text.splitlines()
        header = comment_blocks(lines)[0] if lines and lines[0].startswith("--") else []
        titles[path.name] = header[0] if header else path.stem
        blocks[path.name] = [" ".join(block) for block in comment_blocks(lines)]
        for match in _CREATE.finditer(text):
            name = match.group(1)
            close = _balanced(text, match.end())
            arguments = split_top_level(text[match.end() : close - 1])
            # A SQL-standard body ("RETURN expression;") has no dollar quotes: it ends at the
            # first semicolon, before any later function's quoted body.
            standard = re.compile(r"\bRETURN\b(.*?);", re.S).search(text, close)
            quoted = text.find("$$", close)
            if standard is not None and (quoted < 0 or standard.start() < quoted):
                body_start, body_end = standard.start(), standard.end()
                body = standard.group(1)
            else:
                body_start = quoted
                body_end = text.index("$$", body_start + 2)
                body = text[body_start + 2 : body_end]
            head = " ".join(text[close:body_start].split())
            returns = re.search(r"RETURNS (.*?)(?= LANGUAGE | SET | AS$|$)", head)
            language = re.search(r"LANGUAGE (\w+)(?: (STABLE|IMMUTABLE|VOLATILE))?", head)
            outs = [arg.removeprefix("OUT ") for arg in arguments if arg.startswith("OUT ")]
            function = SqlFunction(
                name=name,
                arguments=[arg for arg in arguments if not arg.startswith("OUT ")],
                returns=(
                    returns.group(1)
                    if returns
                    else ("record (" + ", ".join(outs) + ")" if outs else "void")
                ),
                language=language.group(1) if language else "",
                volatility=(language.group(2) if language and language.group(2) else "VOLATILE"),
                comment=_comment_above(lines, text.count("\n", 0, match.start())),
                body=body,
                defined_in=path.name,
            )
            if name in functions:
                raise ValueError(
                    f"{name} is defined in {functions[name].defined_in} and again in {path.name}"
                )
            functions[name] = function
    # A function without a comment of its own is described by a block that names it first,
    # e.g. "pause_queue / resume_queue: ..." above the helper both call.
    for function in functions.values():
        if function.comment:
            continue
        for file_blocks in blocks.values():
            for block in file_blocks:
                named = re.match(r"([\w /,]+):", block)
                if named and function.name in re.split(r"[ /,]+", named.group(1)):
                    function.comment = [block]
    return functions, titles

"""Source comments and docstrings as Markdown.

SQL comment blocks become paragraphs and text blocks; Google-style docstrings become
paragraphs, code blocks and the Args, Returns and Raises sections, with Sphinx roles
(``:meth:`x```) as code spans.
"""

from __future__ import annotations

import re
import textwrap


def paragraphs(comment: list[str]) -> str:
    """A comment block as Markdown paragraphs: blank ``--`` lines separate them; indented
    lines (diagrams, lists) are kept as a text block."""
    out: list[str] = []
    paragraph: list[str] = []
    verbatim: list[str] = []

    def flush() -> None:
        if paragraph:
            out.append(" ".join(paragraph))
            paragraph.clear()
        if verbatim:
            out.append("```text\n" + "\n".join(verbatim) + "\n```")
            verbatim.clear()

    for line in comment:
        if not line.strip():
            flush()
        elif line.startswith("  "):
            if paragraph:
                flush()
            verbatim.append(line)
        else:
            if verbatim:
                flush()
            paragraph.append(line.strip())
    flush()
    return "\n\n".join(out)


def first_sentence(text: str) -> str:
    """``text`` up to its first "." or "?" that ends a word, or all of it."""
    match = re.match(r"(.+?[.?])(\s|$)", text)
    return match.group(1) if match else text


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


_ROLE = re.compile(r":(?:meth|class|func|attr|data|mod|exc):`~?([\w.]+)`")


_SECTIONS = {"Args", "Arguments", "Returns", "Raises", "Yields"}
_ENTRY = re.compile(r"([\w, *.]+):\s*(.*)")


def _section(name: str, lines: list[str]) -> str:
    """A Google-style section: Args and Raises as a list of entries, Returns as a paragraph."""
    if name in ("Returns", "Yields"):
        return f"**{name}:** " + " ".join(line.strip() for line in lines)
    base = min(len(line) - len(line.lstrip()) for line in lines)
    entries: list[str] = []
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        starts = indent == base and _ENTRY.match(stripped) is not None
        if entries and (not starts or entries[-1].endswith(",")):
            entries[-1] += " " + stripped
        else:
            entries.append(stripped)
    items = []
    for entry in entries:
        match = _ENTRY.fullmatch(entry)
        items.append(f"- `{match.group(1)}`: {match.group(2)}" if match else f"- {entry}")
    return f"**{name}:**\n\n" + "\n".join(items)


def markdown_doc(doc: str | None) -> str:
    """A Google-style docstring as Markdown: paragraphs, indented code, and the Args,
    Returns and Raises sections."""
    if not doc:
        return ""
    doc = _ROLE.sub(lambda match: f"`{match.group(1).rsplit('.', 1)[-1]}`", doc)
    doc = doc.replace("``", "`")
    out: list[str] = []
    paragraph: list[str] = []
    code: list[str] = []
    section: tuple[str, list[str]] | None = None

    def flush() -> None:
        nonlocal section
        if paragraph:
            out.append(" ".join(paragraph))
            paragraph.clear()
        if code:
            out.append("```python\n" + textwrap.dedent("\n".join(code)).strip("\n") + "\n```")
            code.clear()
        if section is not None and section[1]:
            out.append(_section(*section))
        section = None

    for line in doc.splitlines():
        stripped = line.strip()
        if stripped.endswith(":") and stripped[:-1] in _SECTIONS:
            flush()
            section = (stripped[:-1], [])
        elif section is not None and (line.startswith(" ") or not stripped):
            if stripped:
                section[1].append(line)
        elif not stripped:
            if code:
                code.append("")  # a blank line inside an indented example
            else:
                flush()
        elif line.startswith("    ") or (code and line.startswith(" ")):
            if paragraph or section is not None:
                flush()
            code.append(line)
        else:
            if code or section is not None or stripped.startswith("- "):
                flush()  # a list item starts a paragraph of its own
            paragraph.append(stripped)
    flush()
    return "\n\n".join(out)

"""docs/index.md, the site's home page: the README, with its links made relative to docs/.

The README is the one source of both, so the two never drift: a link into docs/ loses that
prefix, and a link to a directory outside the site (an example) becomes its path in code.
"""

from __future__ import annotations

import re

from docgen import GENERATED, ROOT


def render_index() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    text = text.replace(
        "(or read the pages in [docs/](docs/index.md))",
        "(or read these pages in the repository's `docs/`)",
    )
    text = re.sub(r"\]\(docs/([^)]*)\)", r"](\1)", text)
    text = re.sub(
        r"\[([^\]]*)\]\(((?:examples|benchmarks)/[^)]*)\)",
        lambda link: f"`{link[2]}`" if link[1] == link[2] else f"{link[1]} (`{link[2]}`)",
        text,
    )
    return f"{GENERATED}\n\n{text}"

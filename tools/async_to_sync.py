"""Generate the synchronous modules from their asyncio sources.

The async module is the one we edit; its synchronous twin is derived by removing ``async`` and
``await`` and renaming the async types, then formatted with ruff. This is how psycopg keeps its
two APIs in step, and it means the sync code is never a hand-written copy.

    python tools/async_to_sync.py          # rewrite the generated files
    python tools/async_to_sync.py --check  # exit 1 if any generated file is out of date
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAIRS = {
    "src/postkit/queue/client_async.py": "src/postkit/queue/client.py",
    "src/postkit/queue/listen_async.py": "src/postkit/queue/listen.py",
    "src/postkit/queue/operations_async.py": "src/postkit/queue/operations.py",
}
REWRITES = [
    (r"\basync def\b", "def"),
    (r"\basync with\b", "with"),
    (r"\basync for\b", "for"),
    (r"\bawait\s+", ""),
    (r"\bAsyncQueueClient\b", "QueueClient"),
    (r"\bAsyncWorkListener\b", "WorkListener"),
    (r"\bAsyncOperations\b", "Operations"),
    (r"\bpsycopg\.AsyncConnection\b", "psycopg.Connection"),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\brun_async\b", "run"),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\bpostkit\.queue\.client_async\b", "postkit.queue.client"),
    (r"\bpostkit\.queue\.listen_async\b", "postkit.queue.listen"),
    (r"\bpostkit\.queue\.operations_async\b", "postkit.queue.operations"),
]


def generate(source: Path) -> str:
    text = source.read_text(encoding="utf-8")
    for pattern, replacement in REWRITES:
        text = re.sub(pattern, replacement, text)
    header = (
        f"# Generated from {source.name} by tools/async_to_sync.py: edit that file, not this one.\n"
    )
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", source.name, "-"],
        input=header + text,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return formatted.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args()
    stale = []
    for source, target in PAIRS.items():
        generated = generate(ROOT / source)
        path = ROOT / target
        if path.exists() and path.read_text(encoding="utf-8") == generated:
            continue
        stale.append(target)
        if not args.check:
            path.write_text(generated, encoding="utf-8")
    if args.check and stale:
        print("out of date (run python tools/async_to_sync.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

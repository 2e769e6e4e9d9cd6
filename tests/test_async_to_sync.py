"""tools/async_to_sync.py derives a sync module from its async source's syntax tree: code is
renamed and de-async'ed, while docstrings, strings and comments are copied as they are."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]

SOURCE = '''"""The source of AsyncQueueClient: ``await`` it."""

from postkit.queue.client_async import AsyncQueueClient
from postkit.queue.executor import run_async

LIMIT = 10_000
"""At most this many (see AsyncQueueClient)."""


class AsyncThing(AsyncQueueClient):
    async def go(self, cursor: object) -> tuple[int, int]:
        # Kept: AsyncQueueClient, async with, await.
        async with self.lock:
            async for row in self.rows():
                await run_async(cursor, row, owner="AsyncQueueClient")
        if self.a or self.b or not self.c:
            pass
        return 1, await self.count()

    async def __aenter__(self) -> AsyncThing:
        return self
'''


def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("async_to_sync", ROOT / "tools/async_to_sync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_code_becomes_synchronous_and_docstrings_strings_and_comments_stay(
    tmp_path: Path,
) -> None:
    source = tmp_path / "thing_async.py"
    source.write_text(SOURCE, encoding="utf-8")

    generated = tool().generate(source)

    assert generated.startswith("# Generated from thing_async.py by tools/async_to_sync.py")
    assert "from postkit.queue.client import QueueClient\n" in generated
    assert "from postkit.queue.executor import run\n" in generated
    assert "class AsyncThing(QueueClient):" in generated
    assert "    def go(self, cursor: object) -> tuple[int, int]:" in generated
    assert "        with self.lock:\n            for row in self.rows():\n" in generated
    assert '                run(cursor, row, owner="AsyncQueueClient")' in generated
    assert "        if self.a or self.b or not self.c:" in generated
    assert "        return 1, self.count()" in generated
    assert "    def __enter__(self) -> AsyncThing:" in generated
    assert "await " not in generated.replace("``await``", "")
    assert '"""The source of AsyncQueueClient: ``await`` it."""' in generated
    assert 'LIMIT = 10_000\n"""At most this many (see AsyncQueueClient)."""' in generated
    assert "# Kept: AsyncQueueClient, async with, await." in generated

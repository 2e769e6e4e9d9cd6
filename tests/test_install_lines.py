"""Every install line in the docs installs this project, under its name on the package index,
and every import of the docs' Python is covered by what the page tells the reader to install:
the dependencies, or an extra the page names."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
NAME = "postkit-queue"
"""The distribution's name: free on the package index when it was chosen (postkit there is
another project, 0.12.1 on 2026-12-06)."""


def project() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return dict(tomllib.load(file)["project"])


def distributions(requirements: list[str]) -> set[str]:
    return {Requirement(line).name.lower().replace("_", "-") for line in requirements}


def imports(page: Path) -> set[str]:
    """The top-level modules the page's Python blocks import, but the standard library's and
    postkit's own."""
    found: set[str] = set()
    for block in re.findall(r"```py(?:thon)?\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
        try:
            tree = ast.parse(block)
        except SyntaxError:
            continue  # an excerpt, not a program
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return {name for name in found if name not in sys.stdlib_module_names and name != "postkit"}


def test_the_distribution_has_a_name_of_its_own_on_the_package_index() -> None:
    assert project()["name"] == NAME


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_install_line_names_this_project(page: Path) -> None:
    text = page.read_text(encoding="utf-8")

    assert re.findall(r"pip install ['\"]?postkit(?![-\w])", text) == []
    for extras in re.findall(rf"{NAME}\[([\w,-]+)\]", text):
        assert set(extras.split(",")) <= set(project()["optional-dependencies"]), extras  # type: ignore[call-overload]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_import_of_a_page_is_installed_by_what_the_page_names(page: Path) -> None:
    """A module maps to its distribution through what is installed here (the dev extra has
    them all); a module no installed distribution provides is the example's own (tasks)."""
    text = page.read_text(encoding="utf-8")
    extras: dict[str, list[str]] = project()["optional-dependencies"]  # type: ignore[assignment]
    named = {
        extra
        for group in re.findall(rf"(?:{NAME}|\.)\[([\w,-]+)\]", text)
        for extra in group.split(",")
        if extra != "dev"
    }
    covered = distributions(project()["dependencies"])  # type: ignore[arg-type]
    for extra in named:
        covered |= distributions(extras[extra])
    providers = importlib.metadata.packages_distributions()

    uncovered = {
        module: providers[module]
        for module in imports(page)
        if module in providers
        and not {name.lower().replace("_", "-") for name in providers[module]} & covered
    }

    assert uncovered == {}

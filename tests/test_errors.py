"""The exception hierarchy, and the SQLSTATE table kept in step with the SQL module."""

from __future__ import annotations

import inspect
import re

import psycopg
import pytest

from postkit import errors
from postkit.errors import translate_error
from postkit.queue import install_script

ERRCODE = re.compile(r"ERRCODE\s*=\s*'([0-9A-Z]{5})'")


def sql_errcodes() -> set[str]:
    """Every SQLSTATE the installed SQL can raise: the migrations, and the install script that
    applies them."""
    return set(ERRCODE.findall(install_script()))


def exception_classes() -> list[type[BaseException]]:
    return [
        value
        for _, value in inspect.getmembers(errors, inspect.isclass)
        if issubclass(value, BaseException) and value.__module__ == errors.__name__
    ]


PKQ_CODES = sorted(code for code in errors.SQLSTATE_ERRORS if code.startswith("PKQ"))


def test_every_errcode_raised_in_sql_has_an_exception_and_every_pkq_exception_is_raised() -> None:
    assert sql_errcodes() <= set(errors.SQLSTATE_ERRORS)
    assert {code for code in sql_errcodes() if code.startswith("PKQ")} == set(PKQ_CODES)


def test_the_sql_module_raises_postkit_sqlstates_and_only_insufficient_privilege_besides() -> None:
    assert {code for code in sql_errcodes() if not code.startswith("PKQ")} == {"42501"}


def test_every_exception_is_a_postkit_error() -> None:
    classes = exception_classes()

    assert len(classes) >= 10
    assert [cls.__name__ for cls in classes if not issubclass(cls, errors.PostkitError)] == []


def test_every_exception_is_exported() -> None:
    assert {cls.__name__ for cls in exception_classes()} <= set(errors.__all__)


def test_every_mapped_exception_is_a_postkit_error() -> None:
    assert all(issubclass(cls, errors.PostkitError) for cls in errors.SQLSTATE_ERRORS.values())


def test_every_validation_error_is_also_a_value_error() -> None:
    validation = [cls for cls in exception_classes() if issubclass(cls, errors.ValidationError)]

    assert len(validation) >= 8
    assert all(issubclass(cls, ValueError) for cls in validation)


def test_every_pkq_sqlstate_is_a_validation_error_but_a_mismatch() -> None:
    refusals = {code for code in PKQ_CODES if code != "PKQ12"}

    assert all(
        issubclass(errors.SQLSTATE_ERRORS[code], errors.ValidationError) for code in refusals
    )
    assert errors.SQLSTATE_ERRORS["PKQ12"] is errors.SchemaMismatchError


def raised_by(conn: psycopg.Connection, statement: str) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as raised:
        conn.execute(statement)
    conn.rollback()
    return raised.value


@pytest.mark.parametrize("code", PKQ_CODES)
def test_a_pkq_error_from_the_server_becomes_its_exception_without_the_prefix(
    conn: psycopg.Connection, code: str
) -> None:
    driver_error = raised_by(
        conn, f"DO $$ BEGIN RAISE EXCEPTION 'postkit: boom' USING ERRCODE = '{code}'; END $$"
    )

    translated = translate_error(driver_error)

    assert type(translated) is errors.SQLSTATE_ERRORS[code]
    assert str(translated) == "boom"


def test_a_missing_queue_function_means_the_schema_is_not_installed(
    conn: psycopg.Connection,
) -> None:
    translated = translate_error(raised_by(conn, "SELECT postkit_queue.no_such_function()"))

    assert isinstance(translated, errors.SchemaNotInstalledError)
    assert "postkit install" in str(translated)


def test_errors_postkit_does_not_own_are_not_translated(conn: psycopg.Connection) -> None:
    assert translate_error(raised_by(conn, "SELECT no_such_function()")) is None
    assert translate_error(raised_by(conn, "SELECT 1 / 0")) is None

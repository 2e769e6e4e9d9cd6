"""Each rule of the Citus checker (sql_rules.py) catches a statement that breaks it, and passes
the same statement written the way the SQL module writes it."""

from __future__ import annotations

import pytest

from tests.citus.sql_rules import (
    Function,
    Schema,
    planned_generically,
    violations,
)

SCHEMA = Schema(
    sharded_tables=frozenset({"jobs", "dead_letters", "queue_settings"}),
    volatile_functions=frozenset({("pg_catalog", "gen_random_uuid"), ("pg_catalog", "random")}),
    set_returning_functions=frozenset({("pg_catalog", "unnest")}),
)


def rules_broken(
    body: str,
    *,
    generic: bool = False,
    declare: str = "",
    name: str = "f",
    returns: str = "void",
) -> set[str]:
    definition = f"""CREATE OR REPLACE FUNCTION postkit_queue.{name}(
    p_namespace text, p_ids bigint[])
 RETURNS {returns} LANGUAGE plpgsql
AS $function$
DECLARE v_count bigint; v_job postkit_queue.jobs; {declare}
BEGIN
{body}
END
$function$"""
    function = Function(name, definition, "p_namespace", generic)
    return {violation.rule for violation in violations(function, SCHEMA)}


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT count(*) INTO v_count FROM postkit_queue.jobs j WHERE j.queue = 'q';",
        "SELECT count(*) INTO v_count FROM postkit_queue.jobs j "
        "WHERE j.namespace = p_namespace OR j.queue = 'q';",
        "UPDATE postkit_queue.jobs SET attempts = 0 WHERE namespace = v_job.namespace;",
        "DELETE FROM postkit_queue.jobs j WHERE (j.namespace, j.id) IN "
        "(SELECT p.namespace, p.id FROM postkit_queue.jobs p WHERE p.namespace = p_namespace);",
        "INSERT INTO postkit_queue.dead_letters (namespace, job_id) VALUES ('other', 1);",
        "INSERT INTO postkit_queue.dead_letters (job_id) VALUES (1);",
        "SELECT count(*) INTO v_count FROM postkit_queue.jobs j "
        "JOIN postkit_queue.queue_settings s ON s.queue = j.queue WHERE j.namespace = p_namespace;",
    ],
)
def test_a_statement_that_does_not_name_its_namespace_breaks_the_namespace_rule(
    statement: str,
) -> None:
    assert rules_broken(statement) == {"namespace"}


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT count(*) INTO v_count FROM postkit_queue.jobs j "
        "WHERE j.namespace = p_namespace AND j.queue = 'q';",
        "UPDATE postkit_queue.jobs SET attempts = 0 WHERE namespace = p_namespace AND id = 1;",
        "INSERT INTO postkit_queue.dead_letters (namespace, job_id) VALUES (p_namespace, 1);",
        "SELECT count(*) INTO v_count FROM postkit_queue.jobs j "
        "JOIN postkit_queue.queue_settings s ON s.namespace = p_namespace AND s.queue = j.queue "
        "WHERE j.namespace = p_namespace;",
    ],
)
def test_a_statement_naming_its_namespace_at_the_top_passes(statement: str) -> None:
    assert rules_broken(statement) == set()


def test_a_namespace_named_twice_breaks_the_namespace_rule() -> None:
    assert rules_broken(
        "SELECT count(*) INTO v_count FROM postkit_queue.jobs j "
        "WHERE j.namespace = p_namespace AND j.namespace <> 'x';"
    ) == {"namespace"}


@pytest.mark.parametrize(
    "statement",
    [
        "v_count := cardinality(ARRAY(SELECT j.id FROM postkit_queue.jobs j "
        "WHERE j.namespace = p_namespace LIMIT 1));",
        "WITH done AS (DELETE FROM postkit_queue.jobs j WHERE j.namespace = p_namespace "
        "RETURNING j.id) SELECT count(*) INTO v_count FROM done;",
        "SELECT count(*) INTO v_count FROM (SELECT FROM postkit_queue.jobs j "
        "WHERE j.namespace = p_namespace) held;",
        "INSERT INTO postkit_queue.dead_letters (namespace, job_id) "
        "SELECT p_namespace, i FROM unnest(p_ids) AS i;",
        "SELECT unnest(p_ids) INTO v_count FROM postkit_queue.jobs j "
        "WHERE j.namespace = p_namespace;",
        "SELECT j.id INTO v_count FROM postkit_queue.jobs j WHERE j.namespace = p_namespace "
        "UNION SELECT 1;",
    ],
)
def test_a_statement_citus_cannot_route_unbound_breaks_the_fast_path_rule_when_planned_generically(
    statement: str,
) -> None:
    assert "fast-path" in rules_broken(statement, generic=True)
    assert "fast-path" not in rules_broken(statement, generic=False)


def test_a_loop_over_one_table_is_a_fast_path_statement() -> None:
    assert (
        rules_broken(
            "FOR v_id IN SELECT j.id FROM postkit_queue.jobs j WHERE j.namespace = p_namespace "
            "ORDER BY j.id LIMIT 10 FOR UPDATE SKIP LOCKED LOOP END LOOP;",
            generic=True,
            declare="v_id bigint;",
        )
        == set()
    )


def test_a_volatile_function_inside_an_update_breaks_the_volatile_rule() -> None:
    assert rules_broken(
        "UPDATE postkit_queue.jobs j SET claim_token = gen_random_uuid() "
        "WHERE j.namespace = p_namespace;"
    ) == {"volatile"}
    assert (
        rules_broken(
            "v_token := gen_random_uuid(); UPDATE postkit_queue.jobs j SET claim_token = v_token "
            "WHERE j.namespace = p_namespace;",
            declare="v_token uuid;",
        )
        == set()
    )


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM postkit_queue.jobs j WHERE j.namespace = p_namespace "
        "AND postkit_queue.holds_claim(j, 'w', NULL);",
        "PERFORM postkit_queue.record_outcomes(ARRAY[v_job], 'completed');",
        "v_count := postkit_queue.size_of(v_job);",
        "SELECT count(postkit_queue.size_of(j.*)) INTO v_count FROM postkit_queue.jobs j "
        "WHERE j.namespace = p_namespace;",
    ],
)
def test_a_row_passed_whole_to_a_function_breaks_the_whole_row_rule(statement: str) -> None:
    assert rules_broken(statement) == {"whole-row"}


def test_a_rows_columns_passed_to_a_function_pass() -> None:
    assert (
        rules_broken(
            "v_count := postkit_queue.size_of(v_job.id, v_job.payload); "
            "DELETE FROM postkit_queue.jobs j WHERE j.namespace = p_namespace "
            "AND postkit_queue.holds_claim(j.worker_id, j.claim_token, 'w', NULL);"
        )
        == set()
    )


@pytest.mark.parametrize(
    "statement", ["NOTIFY postkit_wake;", "PERFORM pg_notify('postkit_wake', '');"]
)
def test_a_notification_outside_the_helper_breaks_the_notify_rule(statement: str) -> None:
    assert rules_broken(statement) == {"notify"}
    assert rules_broken(statement, name="send_notification") == set()


def test_dynamic_sql_in_a_function_that_takes_a_namespace_breaks_the_dynamic_rule() -> None:
    assert rules_broken("EXECUTE format('DELETE FROM postkit_queue.%I', 'jobs');") == {"dynamic"}


def test_a_function_without_a_plan_mode_of_its_own_is_planned_as_its_caller_plans() -> None:
    own_mode = {
        "pull": "force_generic_plan",
        "policy": None,
        "slot": None,
        "batch": "force_custom_plan",
    }
    calls = {"pull": {"policy", "batch"}, "policy": {"slot"}, "batch": {"slot"}}

    assert planned_generically(own_mode, calls) == {"pull", "policy", "slot"}


@pytest.mark.parametrize(
    "statement",
    [
        "FOR v_job IN EXECUTE 'SELECT 1' LOOP END LOOP;",
        "RETURN QUERY EXECUTE 'SELECT 1';",
    ],
)
def test_every_form_of_dynamic_sql_breaks_the_dynamic_rule(statement: str) -> None:
    assert "dynamic" in rules_broken(statement, returns="SETOF integer")


@pytest.mark.parametrize(
    "statement",
    [
        "v_count := postkit_queue.size_of(p_job => v_job);",
        "v_count := postkit_queue.size_of(ROW(v_job.*));",
        "v_count := postkit_queue.size_of(coalesce(v_job, NULL));",
        "SELECT postkit_queue.size_of(array_agg(j)) INTO v_count FROM postkit_queue.jobs j "
        "WHERE j.namespace = p_namespace;",
    ],
)
def test_a_row_inside_an_argument_breaks_the_whole_row_rule(statement: str) -> None:
    assert rules_broken(statement) == {"whole-row"}


def test_an_update_that_moves_a_job_to_another_namespace_breaks_the_namespace_rule() -> None:
    assert rules_broken(
        "UPDATE postkit_queue.jobs SET namespace = 'other' WHERE namespace = p_namespace;"
    ) == {"namespace"}


def test_a_namespace_named_inside_a_subquery_is_not_counted_against_the_outer_table() -> None:
    assert (
        rules_broken(
            "SELECT count(*) INTO v_count FROM postkit_queue.jobs j "
            "WHERE j.namespace = p_namespace AND j.queue IN "
            "(SELECT s.queue FROM postkit_queue.queue_settings s WHERE namespace = p_namespace);"
        )
        == set()
    )

"""compat.py takes each moved Airflow name from where the installed Airflow (3.1 to 3.3) has it: the objects
must be the ones Airflow's task runner itself uses, or a listener would never be called and a failure would
be retried. The same tests run on the newest Airflow and, in the compat stage, on the oldest."""

from __future__ import annotations

import asyncio

import pytest

from airflow_provider_iceberg_exec import compat


def test_the_listener_manager_is_the_one_the_task_runner_calls() -> None:
    from airflow.sdk.execution_time import task_runner

    assert compat.get_listener_manager() is task_runner.get_listener_manager()


def test_the_fail_exception_is_the_one_the_task_runner_fails_without_retry() -> None:
    from airflow.sdk.execution_time import task_runner

    # Airflow 3.2+ imports it into the module; 3.1 imports it from airflow.exceptions when a task ends
    runner_class = getattr(task_runner, "AirflowFailException", None)
    if runner_class is None:
        from airflow.exceptions import AirflowFailException as runner_class
    assert compat.AirflowFailException is runner_class


def test_conf_reads_the_providers_section_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__ICEBERG_EXEC__MEMORY_LIMIT", "3GiB")
    assert compat.conf.get("iceberg_exec", "memory_limit", fallback="x") == "3GiB"


def test_amask_secret_masks_the_secret_in_what_is_logged() -> None:
    from airflow.sdk._shared.secrets_masker import redact

    asyncio.run(compat.amask_secret("s3cr3t-0123456789"))
    assert "s3cr3t-0123456789" not in str(redact("password=s3cr3t-0123456789 in a log line"))


def test_the_commits_backoff_is_what_the_installed_airflow_takes() -> None:
    """Airflow 3.1 types ``retry_exponential_backoff`` as a flag and refuses a float at DAG parse time."""
    from airflow_provider_iceberg_exec.operators.commit import CommitOperator

    commit = CommitOperator(task_id="commit", results=[], table="ns.t")
    expected = compat.retry_exponential_backoff(2.0)
    assert commit.retry_exponential_backoff == expected
    assert expected in (True, 2.0)
    assert compat.retry_exponential_backoff(0) in (False, 0)


def test_an_alias_events_extra_is_what_the_installed_airflow_can_store() -> None:
    """Airflow 3.1 fails the task on a list in an alias event's extra (it hashes the items)."""
    extra = compat.alias_event_extra({"table": "ns.t", "snapshot_ids": [1, 2], "already_committed": False})
    if compat.AIRFLOW_3_1:
        assert extra == {"table": "ns.t", "snapshot_ids": "1,2", "already_committed": False}
        assert frozenset(extra.items())
    else:
        assert extra["snapshot_ids"] == [1, 2]

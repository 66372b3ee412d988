"""The manifest-rewrite operator: rendered arguments reach the engine; bad input fails without retry; and
once with the real engine against a real SQLite catalog."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from airflow_provider_iceberg_exec.compat import AirflowFailException
from airflow_provider_iceberg_exec.engine import errors
from airflow_provider_iceberg_exec.operators.manifests import IcebergRewriteManifestsOperator, _sort_by
from tests.helpers import live_checksum
from tests.unit.support import TABLE

REWRITE = "airflow_provider_iceberg_exec.engine.ops.manifests.rewrite_manifests"


def _context(task_id: str = "rewrite_manifests", **params) -> dict:
    ti = SimpleNamespace(dag_id="maint", run_id="scheduled__2024-01-01", task_id=task_id, map_index=-1)
    return {"ti": ti, "run_id": ti.run_id, "params": params}


def _result(**overrides) -> dict:
    return {
        "schema": "iceberg-exec/rewrite-manifests-result@1",
        "table": TABLE,
        "branch": "main",
        "spec_id": 0,
        "sort_by": [],
        "target_size_bytes": 8 << 20,
        "rewritten_manifests_count": 12,
        "added_manifests_count": 1,
        "kept_manifests_count": 0,
        "rewritten_entries_count": 12,
        "snapshot_ids": [5],
        "commit_id": "c",
        "already_committed": False,
        **overrides,
    }


def test_rendered_arguments_and_the_derived_commit_id_reach_the_engine(sqlite_table, monkeypatch):
    seen = {}

    def rewrite_manifests(table, **kwargs):
        seen.update(kwargs, table=table.name())
        return _result()

    monkeypatch.setattr(REWRITE, rewrite_manifests)
    op = IcebergRewriteManifestsOperator(
        task_id="rewrite_manifests",
        table="{{ params.table }}",
        spec_id="{{ params.spec }}",
        sort_by="{{ params.fields }}",
        target_size_bytes="{{ params.size }}",
    )
    context = _context(table=TABLE, spec="0", fields="event_date,id", size="4MiB")
    op.render_template_fields(context)

    result = op.execute(context)

    assert json.loads(json.dumps(result)) == result
    assert seen == {
        "table": ("ns", "events"),
        "spec_id": 0,
        "sort_by": ["event_date", "id"],
        "target_size_bytes": 4 << 20,
        "branch": "main",
        "commit_id": "airflow:maint:scheduled__2024-01-01:rewrite_manifests",
    }


def test_defaults_leave_the_choices_to_the_engine(sqlite_table, monkeypatch):
    seen = {}
    monkeypatch.setattr(REWRITE, lambda table, **kwargs: seen.update(kwargs) or _result(snapshot_ids=[]))

    IcebergRewriteManifestsOperator(task_id="t", table=TABLE, commit_id="mine").execute(_context("t"))

    assert (seen["spec_id"], seen["sort_by"], seen["target_size_bytes"], seen["commit_id"]) == (
        None,
        None,
        None,
        "mine",
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("None", None),
        (["a", " b "], ["a", "b"]),
        ('["x", "y"]', ["x", "y"]),
        ("a, b", ["a", "b"]),
    ],
)
def test_sort_by_renders_from_a_list_a_json_array_or_names(value, expected):
    assert _sort_by(value) == expected


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"spec_id": "one"}, "spec_id must be an integer"), ({"target_size_bytes": "huge"}, "huge")],
)
def test_bad_arguments_fail_without_retry(sqlite_table, monkeypatch, kwargs, message):
    monkeypatch.setattr(REWRITE, lambda table, **kw: pytest.fail("the engine must not be called"))
    op = IcebergRewriteManifestsOperator(task_id="t", table=TABLE, **kwargs)
    with pytest.raises(AirflowFailException, match=message):
        op.execute(_context("t"))


def test_an_engine_configuration_error_fails_without_retry(sqlite_table, monkeypatch):
    def refuse(table, **kwargs):
        raise errors.ConfigurationError("unknown spec id 9 for ns.events; its specs are [0]")

    monkeypatch.setattr(REWRITE, refuse)
    with pytest.raises(AirflowFailException, match="unknown spec id 9"):
        IcebergRewriteManifestsOperator(task_id="t", table=TABLE, spec_id=9).execute(_context("t"))


def test_with_the_real_engine_twelve_manifests_become_one_and_a_retry_reports_it(sqlite_table):
    before = live_checksum(sqlite_table)
    op = IcebergRewriteManifestsOperator(task_id="rewrite_manifests", table=TABLE)

    result = op.execute(_context())
    again = op.execute(_context())

    assert (result["rewritten_manifests_count"], result["added_manifests_count"]) == (12, 1)
    assert again["already_committed"] is True
    assert again["snapshot_ids"] == result["snapshot_ids"]
    sqlite_table.refresh()
    assert len(sqlite_table.current_snapshot().manifests(sqlite_table.io)) == 1
    assert live_checksum(sqlite_table) == before

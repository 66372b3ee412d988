"""The orphan-file and snapshot-expiry operators, with the engine patched by dotted path; and once each
with the real engine against a real SQLite catalog."""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace

import pytest

from airflow_provider_iceberg_exec.compat import AirflowFailException
from airflow_provider_iceberg_exec.engine import errors
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import IncompleteListingError
from airflow_provider_iceberg_exec.operators.maintenance import (
    ExpireSnapshotsOperator,
    OrphanDeleteOperator,
    OrphanScanOperator,
    flag,
)
from tests.unit.support import TABLE

SCAN = "airflow_provider_iceberg_exec.engine.ops.orphans.scan_orphan_files"
DELETE = "airflow_provider_iceberg_exec.engine.ops.orphans.delete_orphan_files"
EXPIRE = "airflow_provider_iceberg_exec.engine.ops.expire.expire_snapshots"


def _context(task_id: str = "task", **params) -> dict:
    ti = SimpleNamespace(
        dag_id="maintenance", run_id="scheduled__2024-01-01T00:00:00+00:00", task_id=task_id, map_index=-1
    )
    return {"ti": ti, "run_id": ti.run_id, "params": params}


def _scan_result(**overrides) -> dict:
    return {
        "schema": "iceberg-exec/orphan-scan-result@1",
        "table": TABLE,
        "orphan_file_count": 2,
        "orphan_bytes_count": 10,
        "orphan_sample": ["file:///w/a", "file:///w/b"],
        "orphan_list_uri": "file:///w/orphans.txt",
        "result_uri": "file:///w/orphans.json",
        **overrides,
    }


def _delete_result(dry_run: bool) -> dict:
    return {
        "schema": "iceberg-exec/orphan-delete-result@1",
        "table": TABLE,
        "dry_run": dry_run,
        "deleted_file_count": 2,
        "deleted_bytes_count": 10,
        "skipped_referenced_count": 0,
        "skipped_younger_count": 0,
        "missing_file_count": 0,
        "failed_file_count": 0,
    }


# ---------------------------------------------------------------- scan


def test_scan_passes_rendered_arguments_to_the_engine(sqlite_table, monkeypatch):
    seen = {}

    def scan_orphan_files(table, **kwargs):
        seen.update(kwargs, table=table.name())
        return _scan_result()

    monkeypatch.setattr(SCAN, scan_orphan_files)
    op = OrphanScanOperator(
        task_id="orphan_scan",
        table="{{ params.table }}",
        older_than="{{ params.age }}",
        prefix_mismatch_mode="{{ params.mode }}",
        equal_schemes='{"s3a,s3n": "s3", "gs": "{{ params.gs }}"}',
        memory_limit="{{ params.memory }}",
    )
    context = _context("orphan_scan", table=TABLE, age="7d", mode="ignore", gs="gcs", memory="64MiB")
    op.render_template_fields(context)
    out = op.execute(context)

    assert out == _scan_result()
    assert json.loads(json.dumps(out)) == out
    assert seen["table"] == ("ns", "events")
    assert seen["older_than"] == "7d"
    assert seen["prefix_mismatch_mode"] == "ignore"
    assert seen["equal_schemes"] == {"s3a,s3n": "s3", "gs": "gcs"}
    assert seen["equal_authorities"] == {}
    assert seen["location"] is None
    assert seen["force"] is False
    assert isinstance(seen["limits"], ResourceLimits)
    assert seen["limits"].memory_limit_bytes == 64 * 1024 * 1024
    # The list goes to a stable name under the table's staging directory, so a retry overwrites it.
    assert seen["orphan_list_uri"] == (
        f"{sqlite_table.location()}/metadata/iceberg-exec-staging/"
        "maintenance__scheduled__2024-01-01T00_00_00_00_00__orphan_scan__orphans.txt"
    )


def test_scan_refusals_fail_without_retry(sqlite_table, monkeypatch):
    def gc_disabled(table, **kwargs):
        raise errors.ConfigurationError("Cannot delete orphan files: GC is disabled (deleting files ...)")

    monkeypatch.setattr(SCAN, gc_disabled)
    with pytest.raises(AirflowFailException, match="ConfigurationError: Cannot delete orphan files"):
        OrphanScanOperator(task_id="scan", table=TABLE).execute(_context())


def test_an_incomplete_listing_propagates_so_retries_apply(sqlite_table, monkeypatch):
    def partial(table, **kwargs):
        raise IncompleteListingError("3 file(s) ... missing from the listing")

    monkeypatch.setattr(SCAN, partial)
    with pytest.raises(IncompleteListingError):
        OrphanScanOperator(task_id="scan", table=TABLE).execute(_context())


# ---------------------------------------------------------------- delete


@pytest.mark.parametrize(
    ("rendered", "expected"), [("True", True), ("False", False), (True, True), ("", False)]
)
def test_delete_takes_the_scan_output_and_a_rendered_dry_run(sqlite_table, monkeypatch, rendered, expected):
    calls = []

    def delete_orphan_files(table, scan, **kwargs):
        calls.append((table.name(), dict(scan), kwargs))
        return _delete_result(kwargs["dry_run"])

    monkeypatch.setattr(DELETE, delete_orphan_files)
    op = OrphanDeleteOperator(task_id="delete", scan_result=_scan_result(), dry_run_only=rendered)
    out = op.execute(_context())

    ((table, scan, kwargs),) = calls
    assert table == ("ns", "events")
    assert scan == _scan_result()
    assert kwargs == {"dry_run": expected, "batch_size": 100_000, "max_concurrent_deletes": 8}
    assert json.loads(json.dumps(out)) == out


def test_delete_dry_run_from_a_param_template(sqlite_table, monkeypatch):
    monkeypatch.setattr(DELETE, lambda table, scan, **kw: _delete_result(kw["dry_run"]))
    op = OrphanDeleteOperator(
        task_id="delete", scan_result=_scan_result(), dry_run_only="{{ not params.remove_orphans }}"
    )
    context = _context(remove_orphans=False)
    op.render_template_fields(context)
    assert op.execute(context)["dry_run"] is True


def test_delete_rejects_a_bad_flag_or_payload(sqlite_table, monkeypatch):
    monkeypatch.setattr(DELETE, lambda table, scan, **kw: pytest.fail("must not delete"))
    with pytest.raises(AirflowFailException, match="dry_run_only must be true or false"):
        OrphanDeleteOperator(task_id="d", scan_result=_scan_result(), dry_run_only="maybe").execute(
            _context()
        )
    with pytest.raises(AirflowFailException, match="scan_result must be a scan result"):
        OrphanDeleteOperator(task_id="d", scan_result=[1, 2]).execute(_context())  # type: ignore[arg-type]


def test_flag_parses_rendered_booleans():
    assert flag("TRUE", "x") is True
    assert flag(" no ", "x") is False
    assert flag(None, "x") is False
    with pytest.raises(errors.ConfigurationError):
        flag("2", "x")


# ---------------------------------------------------------------- expire


def test_expire_passes_rendered_arguments_to_the_engine(sqlite_table, monkeypatch):
    seen = {}

    def expire_snapshots(table, **kwargs):
        seen.update(kwargs)
        return {"schema": "iceberg-exec/expire-snapshots-result@1", "table": TABLE, "dry_run": False}

    monkeypatch.setattr(EXPIRE, expire_snapshots)
    op = ExpireSnapshotsOperator(
        task_id="expire",
        table=TABLE,
        older_than="{{ params.age }}",
        retain_last="{{ params.keep }}",
        snapshot_ids="[1, 2]",
        cleanup="{{ params.cleanup }}",
    )
    context = _context(age="30d", keep=5, cleanup=True)
    op.render_template_fields(context)
    op.execute(context)

    assert seen["older_than"] == "30d"
    assert seen["retain_last"] == 5
    assert seen["snapshot_ids"] == [1, 2]
    assert seen["cleanup"] is True
    assert seen["dry_run"] is False
    assert seen["max_concurrent_deletes"] == 8


def test_expire_defaults_leave_the_table_properties_in_charge(sqlite_table, monkeypatch):
    seen = {}
    monkeypatch.setattr(EXPIRE, lambda table, **kw: seen.update(kw) or {"dry_run": False})
    ExpireSnapshotsOperator(task_id="expire", table=TABLE).execute(_context())
    assert seen["older_than"] is None
    assert seen["retain_last"] is None
    assert seen["snapshot_ids"] == []


def test_expire_bad_input_fails_without_retry(sqlite_table, monkeypatch):
    monkeypatch.setattr(EXPIRE, lambda table, **kw: pytest.fail("must not run"))
    with pytest.raises(AirflowFailException, match="retain_last must be an integer"):
        ExpireSnapshotsOperator(task_id="e", table=TABLE, retain_last="many").execute(_context())
    with pytest.raises(AirflowFailException, match="snapshot_ids must be integers"):
        ExpireSnapshotsOperator(task_id="e", table=TABLE, snapshot_ids='["x"]').execute(_context())


@pytest.mark.parametrize(
    ("operator", "fields"),
    [
        (
            OrphanScanOperator,
            {"table", "older_than", "location", "prefix_mismatch_mode", "equal_schemes", "orphan_list_uri"},
        ),
        (OrphanDeleteOperator, {"scan_result", "table", "dry_run_only"}),
        (ExpireSnapshotsOperator, {"table", "older_than", "retain_last", "snapshot_ids", "dry_run_only"}),
    ],
)
def test_template_fields(operator, fields):
    assert fields <= set(operator.template_fields)
    assert "iceberg_exec_conn_id" in operator.template_fields


# ---------------------------------------------------------------- the real engine


def _age_table_files(table, seconds: float = 10 * 86400) -> None:
    root = table.location().removeprefix("file://")
    then = time.time() - seconds
    for folder, _dirs, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(folder, name), (then, then))


def test_scan_then_delete_with_the_real_engine(sqlite_table, monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW__ICEBERG_EXEC__SPILL_DIR", str(tmp_path / "spill"))
    root = sqlite_table.location().removeprefix("file://")
    orphan = os.path.join(root, "data", "orphan.parquet")
    with open(orphan, "wb") as f:
        f.write(b"stray")
    _age_table_files(sqlite_table)

    scan = OrphanScanOperator(task_id="orphan_scan", table=TABLE, memory_limit="64MiB").execute(_context())
    assert scan["orphan_sample"] == [f"file://{orphan}"]
    dry = OrphanDeleteOperator(task_id="d", scan_result=scan, dry_run_only=True).execute(_context())
    assert dry["deleted_file_count"] == 1
    assert os.path.exists(orphan)
    # A URI of the scan's orphan list works as well as the XCom.
    done = OrphanDeleteOperator(task_id="d", scan_result=scan["orphan_list_uri"]).execute(_context())

    assert done["deleted_file_count"] == 1
    assert not os.path.exists(orphan)
    assert sqlite_table.scan().to_arrow().num_rows == 120


def test_expire_with_the_real_engine(sqlite_table, monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW__ICEBERG_EXEC__SPILL_DIR", str(tmp_path / "spill"))
    snapshots = len(sqlite_table.metadata.snapshots)
    time.sleep(0.01)

    dry = ExpireSnapshotsOperator(
        task_id="expire", table=TABLE, older_than="1ms", retain_last=3, dry_run_only=True
    ).execute(_context())
    out = ExpireSnapshotsOperator(task_id="expire", table=TABLE, older_than="1ms", retain_last=3).execute(
        _context()
    )

    assert dry["expired_snapshot_count"] == out["expired_snapshot_count"] == snapshots - 3
    assert out["deleted_manifest_lists_count"] == snapshots - 3
    assert len(sqlite_table.refresh().metadata.snapshots) == 3
    assert sqlite_table.scan().to_arrow().num_rows == 120

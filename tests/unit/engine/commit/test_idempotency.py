"""engine/commit/idempotency.py: finding a commit by the commit id in snapshot summaries, on a real table.

``find_commit`` matches the exact id, on the branch's ancestry first and then anywhere in the table;
``landed_snapshots`` matches the id and its per-batch ids ``<id>.<n>``, oldest first, on a branch or in
the whole table; ``AlreadyCommittedError`` is a ``ValidationException`` carrying the snapshot."""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest
from pyiceberg.exceptions import ValidationException

from airflow_provider_iceberg_exec.engine.commit.idempotency import (
    COMMIT_ID_PROPERTY,
    AlreadyCommittedError,
    find_commit,
    landed_snapshots,
)

SCHEMA = pa.schema([("id", pa.int64())])


def _append(table, commit_id: str | None, branch: str = "main"):
    """Append one row under ``commit_id`` (none when ``None``) to ``branch``; returns the new snapshot."""
    properties = {} if commit_id is None else {COMMIT_ID_PROPERTY: commit_id}
    table.append(pa.table({"id": [1]}, schema=SCHEMA), snapshot_properties=properties, branch=branch)
    return table.metadata.snapshot_by_name(branch)


@pytest.fixture
def table(catalog):
    return catalog.create_table("ns.t", schema=SCHEMA)


def test_the_property_key_is_the_documented_one() -> None:
    assert COMMIT_ID_PROPERTY == "iceberg-exec.commit-id"


def test_find_commit_returns_the_snapshot_carrying_the_exact_id(table) -> None:
    _append(table, None)
    wanted = _append(table, "job-1")
    _append(table, "job-2")
    found = find_commit(table.metadata, "main", "job-1")
    assert found is not None
    assert found.snapshot_id == wanted.snapshot_id


def test_find_commit_ignores_batch_ids_and_other_prefixes(table) -> None:
    _append(table, "job-1.0")
    _append(table, "job-10")
    assert find_commit(table.metadata, "main", "job-1") is None


def test_find_commit_on_a_table_without_snapshots_finds_nothing(table) -> None:
    assert find_commit(table.metadata, "main", "job-1") is None


def test_find_commit_reports_a_snapshot_the_branch_moved_away_from(table, caplog) -> None:
    first = _append(table, None)
    landed = _append(table, "job-1")
    table.manage_snapshots().rollback_to_snapshot(first.snapshot_id).commit()
    assert table.metadata.snapshot_by_name("main").snapshot_id == first.snapshot_id
    with caplog.at_level(logging.WARNING, logger="airflow_provider_iceberg_exec.engine.commit.idempotency"):
        found = find_commit(table.metadata, "main", "job-1")
    assert found is not None
    assert found.snapshot_id == landed.snapshot_id
    assert f"Commit job-1 is snapshot {landed.snapshot_id}, which is not on branch main" in caplog.text


def test_find_commit_prefers_the_branch_ancestry_over_another_branch(table) -> None:
    """The same id on two branches: the one on the branch asked about is returned, without a warning."""
    base = _append(table, None)
    on_main = _append(table, "job-1")
    table.manage_snapshots().create_branch(base.snapshot_id, "audit").commit()
    on_audit = _append(table, "job-1", branch="audit")
    assert on_main.snapshot_id != on_audit.snapshot_id
    assert find_commit(table.metadata, "audit", "job-1").snapshot_id == on_audit.snapshot_id
    assert find_commit(table.metadata, "main", "job-1").snapshot_id == on_main.snapshot_id


def test_find_commit_on_an_unknown_branch_still_searches_every_snapshot(table) -> None:
    landed = _append(table, "job-1")
    assert find_commit(table.metadata, "no-such-branch", "job-1").snapshot_id == landed.snapshot_id


def test_landed_snapshots_matches_the_id_and_its_batch_ids_oldest_first(table) -> None:
    b0 = _append(table, "job-1.0")
    _append(table, "job-10")
    _append(table, None)
    b1 = _append(table, "job-1.1")
    _append(table, "job-1x")
    whole = _append(table, "job-1")
    _append(table, "other.job-1")
    found = landed_snapshots(table.metadata, "job-1")
    assert [s.snapshot_id for s in found] == [b0.snapshot_id, b1.snapshot_id, whole.snapshot_id]


def test_landed_snapshots_on_a_branch_reads_only_its_ancestry_oldest_first(table) -> None:
    base = _append(table, "job-1.0")
    _append(table, "job-1.1")  # main only
    table.manage_snapshots().create_branch(base.snapshot_id, "audit").commit()
    a1 = _append(table, "job-1.1", branch="audit")
    a2 = _append(table, "job-1.2", branch="audit")
    on_audit = landed_snapshots(table.metadata, "job-1", branch="audit")
    assert [s.snapshot_id for s in on_audit] == [base.snapshot_id, a1.snapshot_id, a2.snapshot_id]
    assert len(landed_snapshots(table.metadata, "job-1")) == 4
    assert len(landed_snapshots(table.metadata, "job-1", branch="main")) == 2


def test_landed_snapshots_on_a_branch_excludes_a_rolled_back_batch(table) -> None:
    b0 = _append(table, "job-1.0")
    _append(table, "job-1.1")
    table.manage_snapshots().rollback_to_snapshot(b0.snapshot_id).commit()
    assert [s.snapshot_id for s in landed_snapshots(table.metadata, "job-1", branch="main")] == [
        b0.snapshot_id
    ]
    assert len(landed_snapshots(table.metadata, "job-1")) == 2


def test_landed_snapshots_of_an_unknown_id_is_empty(table) -> None:
    _append(table, "job-1")
    assert landed_snapshots(table.metadata, "job-2") == []
    assert landed_snapshots(table.metadata, "job-2", branch="main") == []


def test_already_committed_error_is_a_validation_exception_carrying_the_snapshot(table) -> None:
    snapshot = _append(table, "job-1")
    err = AlreadyCommittedError(snapshot)
    assert isinstance(err, ValidationException)
    assert err.snapshot is snapshot
    assert str(err) == f"commit already landed as snapshot {snapshot.snapshot_id}"
    with pytest.raises(ValidationException, match="already landed"):
        raise err

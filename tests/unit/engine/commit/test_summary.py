"""engine/commit/summary.py: the summary of a snapshot that adds and removes files, as Java writes it.

Per-file counts and sizes by content, ``changed-partition-count`` counting the unpartitioned "partition"
too, per-partition summaries up to ``write.summary.partition-limit``, extra properties over the counts,
and the ``total-*`` counts carried from the parent (skipped when the parent lacks one, it is not an
integer, or it would go negative). Data files are the real files of a real SQLite-catalog table."""

from __future__ import annotations

from datetime import date

import pyarrow as pa
import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record

from airflow_provider_iceberg_exec.engine.commit.summary import snapshot_summary_properties

SCHEMA = pa.schema([("id", pa.int64()), ("d", pa.date32())])
JAN1, JAN2 = date(2024, 1, 1), date(2024, 1, 2)
ZERO_TOTALS = {
    "total-records": "0",
    "total-files-size": "0",
    "total-data-files": "0",
    "total-delete-files": "0",
    "total-position-deletes": "0",
    "total-equality-deletes": "0",
}


def _rows(*days: date) -> pa.Table:
    return pa.table({"id": list(range(len(days))), "d": list(days)}, schema=SCHEMA)


def _files(table) -> list[DataFile]:
    """The live data files, smallest record count first."""
    return sorted((task.file for task in table.scan().plan_files()), key=lambda f: f.record_count)


@pytest.fixture
def flat(catalog):
    """Unpartitioned ``ns.flat`` with two appends of 2 and 3 rows: two data files."""
    table = catalog.create_table("ns.flat", schema=SCHEMA)
    table.append(_rows(JAN1, JAN1))
    table.append(_rows(JAN1, JAN2, JAN2))
    return table


@pytest.fixture
def evolved(catalog):
    """``ns.evolved``: one file of 2 rows in spec 0 (unpartitioned), then three in spec 1 (identity ``d``)."""
    table = catalog.create_table("ns.evolved", schema=SCHEMA)
    table.append(_rows(JAN1, JAN1))
    with table.update_spec() as update:
        update.add_field("d", IdentityTransform(), "d")
    table.append(_rows(JAN1, JAN2, JAN2))
    return table


def _delete_file(
    content: DataFileContent, records: int, path: str, partition: Record | None = None
) -> DataFile:
    return DataFile.from_args(
        _table_format_version=2,
        content=content,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record() if partition is None else partition,
        record_count=records,
        file_size_in_bytes=100 * records,
    )


def test_a_first_snapshot_counts_its_files_and_totals_from_zero(flat) -> None:
    files = _files(flat)
    size = sum(f.file_size_in_bytes for f in files)
    properties = snapshot_summary_properties(flat.metadata, added=files, removed=[], previous=None)
    assert properties == {
        "added-data-files": "2",
        "added-records": "5",
        "added-files-size": str(size),
        "changed-partition-count": "1",
        **ZERO_TOTALS,
        "total-records": "5",
        "total-files-size": str(size),
        "total-data-files": "2",
    }


def test_a_replace_carries_the_parent_totals_through_its_changes(flat) -> None:
    """Rewriting both files into one: the totals are the parent's minus the removed plus the added."""
    first, second = _files(flat)
    assert (first.record_count, second.record_count) == (2, 3)
    previous = flat.current_snapshot().summary.additional_properties
    assert previous["total-records"] == "5"
    assert previous["total-data-files"] == "2"
    properties = snapshot_summary_properties(
        flat.metadata, added=[second], removed=[first, second], previous=previous
    )
    assert properties["deleted-data-files"] == "2"
    assert properties["deleted-records"] == "5"
    assert properties["added-data-files"] == "1"
    assert properties["changed-partition-count"] == "1"
    assert properties["total-records"] == "3"
    assert properties["total-data-files"] == "1"
    assert properties["total-files-size"] == str(second.file_size_in_bytes)
    assert properties["total-delete-files"] == "0"


def test_no_files_changes_no_partition_and_keeps_the_totals(flat) -> None:
    previous = dict(flat.current_snapshot().summary.additional_properties)
    properties = snapshot_summary_properties(flat.metadata, added=[], removed=[], previous=previous)
    assert properties["changed-partition-count"] == "0"
    assert {k: v for k, v in properties.items() if k.startswith("total-")} == {
        k: v for k, v in previous.items() if k.startswith("total-")
    }
    assert not any(k.startswith(("added-", "deleted-", "removed-")) for k in properties)


def test_a_total_the_parent_lacks_or_cannot_parse_is_left_out(flat) -> None:
    files = _files(flat)
    previous = {"total-records": "10", "total-data-files": "many", "total-delete-files": "0"}
    properties = snapshot_summary_properties(flat.metadata, added=files, removed=[], previous=previous)
    assert properties["total-records"] == "15"
    assert properties["total-delete-files"] == "0"
    for left_out in (
        "total-data-files",
        "total-files-size",
        "total-position-deletes",
        "total-equality-deletes",
    ):
        assert left_out not in properties


def test_a_total_that_would_go_negative_is_left_out(flat) -> None:
    files = _files(flat)
    previous = {**ZERO_TOTALS, "total-records": "1", "total-data-files": "2"}
    properties = snapshot_summary_properties(flat.metadata, added=[], removed=files, previous=previous)
    assert "total-records" not in properties  # 1 - 5
    assert "total-files-size" not in properties  # 0 - size
    assert properties["total-data-files"] == "0"


def test_delete_files_count_by_content(flat) -> None:
    position = _delete_file(DataFileContent.POSITION_DELETES, 3, "file:///nowhere/pos.parquet")
    equality = _delete_file(DataFileContent.EQUALITY_DELETES, 4, "file:///nowhere/eq.parquet")
    previous = {
        **ZERO_TOTALS,
        "total-delete-files": "1",
        "total-position-deletes": "3",
        "total-files-size": "300",
    }
    properties = snapshot_summary_properties(
        flat.metadata, added=[equality], removed=[position], previous=previous
    )
    assert properties["removed-position-delete-files"] == "1"
    assert properties["removed-position-deletes"] == "3"
    assert properties["added-equality-delete-files"] == "1"
    assert properties["added-equality-deletes"] == "4"
    assert properties["total-delete-files"] == "1"
    assert properties["total-position-deletes"] == "0"
    assert properties["total-equality-deletes"] == "4"
    assert properties["total-files-size"] == "400"
    assert properties["total-records"] == "0"  # delete files are no records


def test_changed_partitions_count_the_unpartitioned_one_across_specs(evolved) -> None:
    """Spec 0's "" partition counts, as in Java; PyIceberg's collector alone would say 2."""
    files = _files(evolved)
    old = [f for f in files if f.spec_id == 0]
    new = [f for f in files if f.spec_id == 1]
    assert len(old) == 1
    assert sorted(f.partition[0] for f in new) == [19723, 19724]
    properties = snapshot_summary_properties(evolved.metadata, added=new, removed=old, previous=None)
    assert properties["changed-partition-count"] == "3"
    assert "partition-summaries-included" not in properties  # the default limit is 0
    assert not any(k.startswith("partitions.") for k in properties)


def test_partition_summaries_up_to_the_table_limit(evolved) -> None:
    new = [f for f in _files(evolved) if f.spec_id == 1]
    with evolved.transaction() as tx:
        tx.set_properties({"write.summary.partition-limit": "2"})
    properties = snapshot_summary_properties(evolved.metadata, added=new, removed=[], previous=None)
    assert properties["changed-partition-count"] == "2"
    assert properties["partition-summaries-included"] == "true"
    by_day = {f.partition[0]: f for f in new}
    jan1, jan2 = by_day[19723], by_day[19724]
    assert properties["partitions.d=2024-01-01"] == (
        f"added-files-size={jan1.file_size_in_bytes},added-data-files=1,added-records=1"
    )
    assert properties["partitions.d=2024-01-02"] == (
        f"added-files-size={jan2.file_size_in_bytes},added-data-files=1,added-records=2"
    )


def test_no_partition_summaries_beyond_the_limit(evolved) -> None:
    new = [f for f in _files(evolved) if f.spec_id == 1]
    with evolved.transaction() as tx:
        tx.set_properties({"write.summary.partition-limit": "1"})
    properties = snapshot_summary_properties(evolved.metadata, added=new, removed=[], previous=None)
    assert properties["changed-partition-count"] == "2"
    assert "partition-summaries-included" not in properties
    assert not any(k.startswith("partitions.") for k in properties)


def test_a_file_without_spec_id_is_in_the_default_spec(evolved) -> None:
    """A writer's file (no ``spec_id``) is read with the default spec 1: its partition path names ``d``."""
    with evolved.transaction() as tx:
        tx.set_properties({"write.summary.partition-limit": "10"})
    written = DataFile.from_args(
        _table_format_version=2,
        content=DataFileContent.DATA,
        file_path="file:///nowhere/new.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(19723),
        record_count=7,
        file_size_in_bytes=70,
    )
    assert not hasattr(written, "spec_id")
    assert evolved.metadata.default_spec_id == 1
    properties = snapshot_summary_properties(evolved.metadata, added=[written], removed=[], previous=None)
    assert properties["partitions.d=2024-01-01"] == "added-files-size=70,added-data-files=1,added-records=7"
    assert properties["changed-partition-count"] == "1"


def test_extra_properties_are_written_over_the_counts(flat) -> None:
    files = _files(flat)
    properties = snapshot_summary_properties(
        flat.metadata,
        added=files,
        removed=[],
        previous=None,
        snapshot_properties={"iceberg-exec.commit-id": "job-1", "changed-partition-count": "9"},
    )
    assert properties["iceberg-exec.commit-id"] == "job-1"
    assert properties["changed-partition-count"] == "9"
    assert properties["total-records"] == "5"
    assert "operation" not in properties


def _dv(records: int, offset: int, size: int, partition: Record | None = None) -> DataFile:
    """A DV entry: a blob of ``size`` bytes of a 1000-byte Puffin file shared with other DVs."""
    return DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.POSITION_DELETES,
        file_path="file:///t/data/shared-deletes.puffin",
        file_format=FileFormat.PUFFIN,
        partition=Record() if partition is None else partition,
        record_count=records,
        file_size_in_bytes=1000,
        referenced_data_file=f"file:///t/data/{offset}.parquet",
        content_offset=offset,
        content_size_in_bytes=size,
    )


def test_dvs_count_as_java_s_snapshot_summary(flat) -> None:
    """A DV counts in added-dvs / removed-dvs, not added-position-delete-files; its cardinality in the
    position deletes; its blob size, not the shared Puffin's, in the files size (Java's UpdateMetrics)."""
    properties = snapshot_summary_properties(
        flat.metadata,
        added=[_dv(3, 4, 50), _dv(2, 54, 40)],
        removed=[_dv(1, 4, 30), _delete_file(DataFileContent.POSITION_DELETES, 2, "file:///t/p.parquet")],
        previous={**ZERO_TOTALS, "total-delete-files": "2", "total-position-deletes": "3"},
    )
    assert properties["added-dvs"] == "2"
    assert properties["removed-dvs"] == "1"
    assert properties["added-delete-files"] == "2"
    assert properties["removed-delete-files"] == "2"
    assert "added-position-delete-files" not in properties
    assert properties["removed-position-delete-files"] == "1"
    assert properties["added-position-deletes"] == "5"
    assert properties["removed-position-deletes"] == "3"
    assert properties["added-files-size"] == "90"
    assert properties["removed-files-size"] == "230"
    assert properties["total-delete-files"] == "2"
    assert properties["total-position-deletes"] == "5"
    keys = list(properties)
    assert keys.index("removed-position-delete-files") < keys.index("added-dvs") < keys.index("removed-dvs")
    assert keys.index("removed-dvs") < keys.index("added-delete-files")

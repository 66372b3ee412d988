"""engine/meta/reachable.py: the reference set of a real table staged to Parquet (every manifest of every
snapshot, the manifest lists, the metadata files), live entries only, and the parsing it relies on."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.meta.reachable import (
    PathNormalizer,
    ReferenceStager,
    RefKind,
    iter_live_content_files,
    parse_older_than,
    path_hash,
    snapshot_manifests,
    stage_table_references,
)

SCHEMA = pa.schema([("id", pa.int64())])
NOW = datetime.datetime(2026, 1, 10, tzinfo=datetime.timezone.utc)


@pytest.fixture
def table(catalog):
    """Two appends then an overwrite: the first two data files are live only in older snapshots."""
    table = catalog.create_table("ns.t", schema=SCHEMA)
    table.append(pa.table({"id": [1]}, schema=SCHEMA))
    table.append(pa.table({"id": [2]}, schema=SCHEMA))
    table.overwrite(pa.table({"id": [3]}, schema=SCHEMA))
    return table


def _data_files(table, snapshot) -> set[str]:
    return {task.file.file_path for task in table.scan(snapshot_id=snapshot.snapshot_id).plan_files()}


def test_live_entries_of_the_current_manifests_are_the_current_data_files(table) -> None:
    current = table.current_snapshot()
    live = {
        path
        for manifest in current.manifests(table.io)
        for path, kind in iter_live_content_files(table.io, manifest)
        if kind is RefKind.DATA
    }
    assert live == _data_files(table, current)


def test_every_snapshots_manifests_are_listed_once(table) -> None:
    manifests = snapshot_manifests(table.io, table.metadata.snapshots)
    per_snapshot = [m.manifest_path for s in table.metadata.snapshots for m in s.manifests(table.io)]
    assert sorted(manifests) == sorted(set(per_snapshot))
    assert len(per_snapshot) > len(manifests)  # shared manifests are read once


def test_the_staged_reference_set_covers_every_file_of_every_snapshot(table, tmp_path) -> None:
    staged = tmp_path / "refs.parquet"
    with ReferenceStager(str(staged), PathNormalizer.of()) as stager:
        stage_table_references(stager, table.io, table.metadata, metadata_location=table.metadata_location)
    rows = pq.read_table(staged).to_pylist()
    by_kind: dict[str, set[str]] = {}
    for row in rows:
        by_kind.setdefault(row["kind"], set()).add(row["uri"])
        assert row["h"] == path_hash(row["path"])
    every_data_file = set().union(*(_data_files(table, s) for s in table.metadata.snapshots))
    assert len(every_data_file) == 3
    assert by_kind["data"] == every_data_file
    assert by_kind["manifest_list"] == {s.manifest_list for s in table.metadata.snapshots}
    assert by_kind["manifest"] == set(snapshot_manifests(table.io, table.metadata.snapshots))
    assert table.metadata_location in by_kind["metadata"]
    assert {e.metadata_file for e in table.metadata.metadata_log} <= by_kind["metadata"]
    assert by_kind["version_hint"] == {f"{table.location()}/metadata/version-hint.text"}
    assert stager.total == len(rows)
    assert stager.counts[RefKind.DATA] == sum(1 for r in rows if r["kind"] == "data")


def test_manifests_already_seen_and_the_metadata_files_can_be_left_out(table, tmp_path) -> None:
    seen = set(snapshot_manifests(table.io, table.metadata.snapshots))
    with ReferenceStager(str(tmp_path / "refs.parquet"), PathNormalizer.of()) as stager:
        stage_table_references(
            stager,
            table.io,
            table.metadata,
            metadata_location=table.metadata_location,
            include_metadata_files=False,
            seen_manifests=seen,
        )
    assert stager.total == stager.counts[RefKind.MANIFEST_LIST] == len(table.metadata.snapshots)


def test_retained_says_which_references_survive(table, tmp_path) -> None:
    head = table.current_snapshot()
    kept = {m.manifest_path for m in head.manifests(table.io)}
    with ReferenceStager(str(tmp_path / "refs.parquet"), PathNormalizer.of()) as stager:
        stage_table_references(
            stager,
            table.io,
            table.metadata,
            metadata_location=None,
            retained_manifests=kept,
            retained_snapshot_ids={head.snapshot_id},
            include_metadata_files=False,
        )
    rows = pq.read_table(tmp_path / "refs.parquet").to_pylist()
    assert {r["uri"] for r in rows if r["kind"] == "manifest_list" and r["retained"]} == {head.manifest_list}
    assert {r["uri"] for r in rows if r["kind"] == "manifest" and r["retained"]} == kept
    assert stager.retained == sum(r["retained"] for r in rows)


def test_equal_schemes_and_authorities_add_to_the_defaults() -> None:
    normalizer = PathNormalizer.of(equal_schemes={"S3X, s3y": "s3"}, equal_authorities={"a,b": "c"})
    assert normalizer.split("S3X://b/p") == ("s3", "c", "/p")
    assert normalizer.split("s3a://a//p") == ("s3", "c", "/p")
    assert normalizer.split("C:/data/p") == ("", "", "C:/data/p")  # a drive letter is no scheme


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("90m", NOW - datetime.timedelta(minutes=90)),
        ("1.5h", NOW - datetime.timedelta(minutes=90)),
        ("1w", NOW - datetime.timedelta(days=7)),
        ("500ms", NOW - datetime.timedelta(milliseconds=500)),
        ("1767225600000", datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)),
        ("2026-01-01T01:00:00+01:00", datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)),
        ("2026-01-01T00:00:00Z", datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)),
        (datetime.datetime(2026, 1, 1), datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)),
    ],
)
def test_older_than_is_a_duration_a_timestamp_or_epoch_milliseconds(value, expected) -> None:
    assert parse_older_than(value, NOW) == expected


@pytest.mark.parametrize("value", ["3 days", "yesterday", "-1d", ""])
def test_an_older_than_that_is_none_of_these_is_refused(value) -> None:
    with pytest.raises(ConfigurationError, match="is neither a duration"):
        parse_older_than(value, NOW)

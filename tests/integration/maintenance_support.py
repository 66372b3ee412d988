"""Support for the orphan-file and snapshot-expiry tests: tables whose metadata references files of every
kind (data, position and equality deletes, a DV-style Puffin entry, manifests, manifest lists, metadata
files, statistics and partition statistics), and helpers to age and list files on disk."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.statistics import BlobMetadata, PartitionStatisticsFile, StatisticsFile
from pyiceberg.table.update import SetPartitionStatisticsUpdate
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

from airflow_provider_iceberg_exec.engine.config import ResourceLimits

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "category", StringType(), required=False),
)
ARROW_SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("category", pa.string())])
DAY = 86400.0
OLD = 10 * DAY


def limits(tmp_path: Path) -> ResourceLimits:
    """A small bounded session, spilling under ``tmp_path``."""
    return ResourceLimits(
        memory_limit_bytes=64 * 1024 * 1024, spill_dir=str(tmp_path / "spill"), target_partitions=2
    )


def local(uri: str) -> str:
    """A ``file://`` location as a plain path."""
    return uri.removeprefix("file://").removeprefix("file:")


def rows(start: int, count: int, category: str) -> pa.Table:
    return pa.table(
        {"id": list(range(start, start + count)), "category": [category] * count}, schema=ARROW_SCHEMA
    )


def create_table(
    catalog: Catalog, name: str = "ns.t", *, partition_name: str | None = None, **props: str
) -> Table:
    """A v2 table, unpartitioned or partitioned by identity(category) under ``partition_name``."""
    spec = (
        PartitionSpec(
            PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name=partition_name)
        )
        if partition_name
        else PartitionSpec()
    )
    return catalog.create_table(
        name, schema=SCHEMA, partition_spec=spec, properties={"format-version": "2", **props}
    )


def files_on_disk(root: str) -> set[str]:
    """Every file under ``root``, hidden ones included, as plain paths."""
    return {os.path.join(d, name) for d, _dirs, names in os.walk(root) for name in names}


def age(paths: Iterable[str], seconds: float = OLD) -> None:
    """Set the modification time of ``paths`` to ``seconds`` ago."""
    then = time.time() - seconds
    for path in paths:
        os.utime(path, (then, then))


def plant(path: str, content: bytes = b"orphan") -> str:
    """Write a file (and its directories); returns the plain path."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(content)
    return path


def _partition(table: Table, category: str) -> Record:
    return Record(category) if table.spec().fields else Record()


def _delete_file(
    table: Table,
    path: str,
    *,
    content: DataFileContent,
    category: str,
    record_count: int,
    file_format: FileFormat = FileFormat.PARQUET,
    equality_ids: list[int] | None = None,
) -> DataFile:
    delete_file = DataFile.from_args(
        content=content,
        file_path=path,
        file_format=file_format,
        partition=_partition(table, category),
        record_count=record_count,
        file_size_in_bytes=os.path.getsize(local(path)),
        column_sizes={},
        value_counts={},
        null_value_counts={},
        nan_value_counts={},
        lower_bounds={},
        upper_bounds={},
        equality_ids=equality_ids,
    )
    delete_file.spec_id = table.metadata.default_spec_id
    return delete_file


def write_position_deletes(
    table: Table, data_file_path: str, positions: Sequence[int], category: str
) -> DataFile:
    """A Parquet position delete file for ``data_file_path`` (not committed)."""
    path = f"{table.location()}/data/pos-{uuid.uuid4().hex}.parquet"
    schema = pa.schema(
        [
            pa.field("file_path", pa.string(), nullable=False, metadata={"PARQUET:field_id": "2147483546"}),
            pa.field("pos", pa.int64(), nullable=False, metadata={"PARQUET:field_id": "2147483545"}),
        ]
    )
    data = pa.table({"file_path": [data_file_path] * len(positions), "pos": sorted(positions)}, schema=schema)
    os.makedirs(os.path.dirname(local(path)), exist_ok=True)
    pq.write_table(data, local(path))
    return _delete_file(
        table, path, content=DataFileContent.POSITION_DELETES, category=category, record_count=len(positions)
    )


def write_equality_deletes(table: Table, ids: Sequence[int], category: str) -> DataFile:
    """A Parquet equality delete file on ``id`` (not committed)."""
    path = f"{table.location()}/data/eq-{uuid.uuid4().hex}.parquet"
    schema = pa.schema([pa.field("id", pa.int64(), metadata={"PARQUET:field_id": "1"})])
    os.makedirs(os.path.dirname(local(path)), exist_ok=True)
    pq.write_table(pa.table({"id": list(ids)}, schema=schema), local(path))
    return _delete_file(
        table,
        path,
        content=DataFileContent.EQUALITY_DELETES,
        category=category,
        record_count=len(ids),
        equality_ids=[1],
    )


def write_dv_like(table: Table, category: str) -> DataFile:
    """A position-delete entry stored as Puffin, as a deletion vector is (its entry's file_path is the
    Puffin file). Enough for the reference sets; not readable as deletes by PyIceberg."""
    path = plant(f"{local(table.location())}/data/dv-{uuid.uuid4().hex}.puffin", b"PFA1....PFA1")
    return _delete_file(
        table,
        "file://" + path,
        content=DataFileContent.POSITION_DELETES,
        category=category,
        record_count=1,
        file_format=FileFormat.PUFFIN,
    )


def append_data_file(table: Table, path: str, *, category: str = "a", branch: str = "main") -> DataFile:
    """Commit an existing file at ``path`` as a data file (no reading), in a fast append."""
    data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=_partition(table, category),
        record_count=1,
        file_size_in_bytes=os.path.getsize(local(path)) if path.startswith(("file:", "/")) else 1,
        column_sizes={},
        value_counts={},
        null_value_counts={},
        nan_value_counts={},
        lower_bounds={},
        upper_bounds={},
    )
    data_file.spec_id = table.metadata.default_spec_id
    with table.transaction() as tx, tx.update_snapshot(branch=branch).fast_append() as append:
        append.append_data_file(data_file)
    table.refresh()
    return data_file


def set_statistics(table: Table, snapshot_id: int) -> str:
    """Write a (dummy) Puffin statistics file for ``snapshot_id`` and register it; returns its URI."""
    uri = f"{table.location()}/metadata/{snapshot_id}-{uuid.uuid4().hex}.stats"
    plant(local(uri))
    size = len(b"orphan")
    stats = StatisticsFile(
        snapshot_id=snapshot_id,
        statistics_path=uri,
        file_size_in_bytes=size,
        file_footer_size_in_bytes=size,
        blob_metadata=[
            BlobMetadata(
                type="apache-datasketches-theta-v1", snapshot_id=snapshot_id, sequence_number=1, fields=[1]
            )
        ],
    )
    with table.update_statistics() as update:
        update.set_statistics(stats)
    table.refresh()
    return uri


def set_partition_statistics(table: Table, snapshot_id: int) -> str:
    """Write a (dummy) partition statistics file for ``snapshot_id`` and register it; returns its URI."""
    uri = f"{table.location()}/metadata/partition-stats-{snapshot_id}-{uuid.uuid4().hex}.parquet"
    plant(local(uri))
    update = SetPartitionStatisticsUpdate.model_validate(
        {
            "partition-statistics": PartitionStatisticsFile(
                snapshot_id=snapshot_id, statistics_path=uri, file_size_in_bytes=6
            )
        }
    )
    tx = table.transaction()
    tx._apply((update,))
    tx.commit_transaction()
    table.refresh()
    return uri


def referenced_uris(table: Table) -> set[str]:
    """Every file the metadata references, computed with PyIceberg's own readers (the oracle)."""
    table.refresh()
    metadata = table.metadata
    out: set[str] = {table.metadata_location}
    out |= {e.metadata_file for e in metadata.metadata_log}
    out |= {s.statistics_path for s in metadata.statistics}
    out |= {s.statistics_path for s in metadata.partition_statistics}
    for snapshot in metadata.snapshots:
        out.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            out.add(manifest.manifest_path)
            out |= {
                e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
            }
    return out


def orphan_list(result: dict[str, Any]) -> list[str]:
    """The lines of a scan's orphan list."""
    with open(local(result["orphan_list_uri"])) as f:
        return [line for line in f.read().splitlines() if line]

"""What copy-on-write reads besides metadata: a data file's live rows (delete files applied), and the
Parquet files an ``overwrite`` loads, checked against the table schema.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.deletes.apply import DeleteStats, iter_live_group_batches
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, first_line
from airflow_provider_iceberg_exec.engine.io.lineage import RowLineage
from airflow_provider_iceberg_exec.engine.io.read import iter_data_file_batches, read_batch_rows
from airflow_provider_iceberg_exec.engine.meta.row_ids import first_row_id
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedFile

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

__all__ = ["Source", "inspect_source", "iter_source_batches", "live_batches"]


def live_batches(
    table: Table,
    scanned: ScannedFile,
    projection: Schema,
    limits: ResourceLimits,
    spill_dir: str,
    *,
    lineage: bool = False,
) -> Iterator[pa.RecordBatch]:
    """The live rows of one data file: ``projection`` of it, or all columns when it has delete files.

    :param lineage: v3: ``_row_id`` and ``_last_updated_sequence_number`` follow as the last two
        columns, inherited values made explicit (:mod:`~.io.lineage`).
    """
    metadata = table.metadata
    if scanned.delete_files:
        return iter_live_group_batches(
            table.io,
            metadata,
            [scanned],
            limits=limits,
            spill_dir=spill_dir,
            stats=DeleteStats(),
            row_lineage=lineage,
        )
    data_file = scanned.data_file
    return iter_data_file_batches(
        table.io,
        data_file,
        table_schema=projection,
        spec=metadata.specs()[data_file.spec_id],
        name_mapping=metadata.name_mapping(),
        format_version=metadata.format_version,
        batch_size=read_batch_rows(data_file, limits.batch_size),
        lineage=RowLineage(first_row_id(data_file), scanned.data_sequence_number) if lineage else None,
    )


@dataclass(frozen=True)
class Source:
    path: str
    size_bytes: int
    record_count: int


def inspect_source(table: Table, path: str) -> Source:
    """Check a Parquet file to load: readable by the table's FileIO, its columns the table's.

    Columns are matched by Iceberg field id when the file has them, else by name; missing optional
    columns are null; types may be promoted as Iceberg allows (int to long, float to double, ...).

    :raises ConfigurationError: for a missing or unreadable file, a column the table does not have, or a
        missing required column.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = table.metadata.schema()
    try:
        input_file = table.io.new_input(path)
        size = len(input_file)
        with input_file.open() as stream:
            footer = pq.ParquetFile(stream, pre_buffer=False)
            names = list(footer.schema_arrow.names)
            rows = footer.metadata.num_rows
    except (FileNotFoundError, OSError, pa.ArrowInvalid, ValueError) as err:
        raise ConfigurationError(f"cannot read Parquet file {path} to load: {first_line(err)}") from err
    table_names = [column.name for column in schema.columns]
    if extra := [n for n in names if n not in table_names]:
        raise ConfigurationError(
            f"{path} has column(s) {', '.join(extra)} that the table does not have; columns: "
            f"{', '.join(table_names)}"
        )
    if missing := [c.name for c in schema.columns if c.required and c.name not in names]:
        raise ConfigurationError(f"{path} lacks required column(s) {', '.join(missing)}")
    return Source(path=path, size_bytes=size, record_count=rows)


def iter_source_batches(table: Table, source: Source, batch_size: int) -> Iterator[pa.RecordBatch]:
    """Stream a Parquet file to load in the table schema, as if it were a data file of the table."""
    from pyiceberg.exceptions import ResolveError
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.table.name_mapping import create_mapping_from_schema
    from pyiceberg.typedef import Record

    metadata = table.metadata
    schema = metadata.schema()
    inspect_source(table, source.path)
    as_data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=source.path,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=source.record_count,
        file_size_in_bytes=source.size_bytes,
    )
    try:
        yield from iter_data_file_batches(
            table.io,
            as_data_file,
            table_schema=schema,
            spec=UNPARTITIONED_PARTITION_SPEC,
            name_mapping=metadata.name_mapping() or create_mapping_from_schema(schema),
            format_version=metadata.format_version,
            batch_size=batch_size,
        )
    except ResolveError as err:
        raise ConfigurationError(f"{source.path} does not fit the table schema: {err}") from err

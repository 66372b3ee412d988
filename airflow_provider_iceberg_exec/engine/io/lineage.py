"""Row lineage columns of format-version 3 tables, read with their inherited values made explicit.

Spec "Row Lineage": ``_row_id`` (field id 2147483540) and ``_last_updated_sequence_number`` (2147483539)
are optional longs a data file may hold. A null ``_row_id`` reads as the file's ``first_row_id`` plus the
row's position (``_pos``) in the file, a null ``_last_updated_sequence_number`` as the file's data
sequence number; when the file has no ``first_row_id`` (written before the table's upgrade to v3) both
read as null. A rewrite that moves rows unchanged (compaction) writes both values as read, so every row
keeps its id and its sequence number, as Java's Spark writer does for rewrite file sets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.schema import Schema

__all__ = [
    "LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID",
    "ROW_ID_FIELD_ID",
    "RowLineage",
    "materialise_lineage",
    "modified_rows_inherit_sequence",
    "with_lineage_columns",
    "without_lineage",
]

ROW_ID_FIELD_ID = 2147483540
LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID = 2147483539
ROW_ID = "_row_id"
LAST_UPDATED_SEQUENCE_NUMBER = "_last_updated_sequence_number"


@dataclass(frozen=True)
class RowLineage:
    """What a data file's rows inherit: its ``first_row_id`` (``None`` before the upgrade) and its data
    sequence number."""

    first_row_id: int | None
    data_sequence_number: int


def with_lineage_columns(schema: Schema) -> Schema:
    """``schema`` with the two lineage columns appended (optional longs), as Java's rewrite write schema."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    if any(field.field_id == ROW_ID_FIELD_ID for field in schema.fields):
        return schema
    return Schema(
        *schema.fields,
        NestedField(ROW_ID_FIELD_ID, ROW_ID, LongType(), required=False),
        NestedField(
            LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID, LAST_UPDATED_SEQUENCE_NUMBER, LongType(), required=False
        ),
        schema_id=schema.schema_id,
        identifier_field_ids=schema.identifier_field_ids,
    )


def materialise_lineage(batch: pa.RecordBatch, start: int, lineage: RowLineage) -> pa.RecordBatch:
    """Fill the lineage columns (the batch's last two) where null: ids from the file's ``first_row_id``
    and the rows' positions ``start, start + 1, ...``, sequence numbers from the file's.

    Non-null values are kept; a file without ``first_row_id`` gives nulls in both columns.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    n_cols = batch.num_columns - 2
    row_ids, sequence_numbers = batch.column(n_cols), batch.column(n_cols + 1)
    if lineage.first_row_id is None:
        row_ids = pa.nulls(n, pa.int64())
        sequence_numbers = pa.nulls(n, pa.int64())
    else:
        positions = pa.array(np.arange(start, start + n, dtype=np.int64) + lineage.first_row_id)
        row_ids = pc.coalesce(row_ids, positions)
        sequence_numbers = pc.coalesce(sequence_numbers, pa.scalar(lineage.data_sequence_number, pa.int64()))
    columns = [*batch.columns[:n_cols], row_ids, sequence_numbers]
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)


def modified_rows_inherit_sequence(batch: pa.RecordBatch, modified: pa.BooleanArray) -> pa.RecordBatch:
    """Null ``_last_updated_sequence_number`` (the last column) where ``modified``: an updated row keeps
    its ``_row_id`` and takes the sequence number of the commit that writes it (spec rule 2)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    last = batch.num_columns - 1
    cleared = pc.if_else(modified, pa.scalar(None, pa.int64()), batch.column(last))
    return pa.RecordBatch.from_arrays([*batch.columns[:last], cleared], schema=batch.schema)


def without_lineage(batch: pa.RecordBatch) -> pa.RecordBatch:
    """New rows (a table schema batch) with both lineage columns null: they inherit theirs on read."""
    import pyarrow as pa

    fields = [
        pa.field(name, pa.int64(), nullable=True, metadata={b"PARQUET:field_id": str(field_id).encode()})
        for name, field_id in (
            (ROW_ID, ROW_ID_FIELD_ID),
            (LAST_UPDATED_SEQUENCE_NUMBER, LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID),
        )
    ]
    nulls = [pa.nulls(batch.num_rows, pa.int64()) for _field in fields]
    return pa.RecordBatch.from_arrays([*batch.columns, *nulls], schema=pa.schema([*batch.schema, *fields]))

"""The live content files (data, position deletes, DVs, equality deletes) of a PyIceberg table, read
from its manifests with PyIceberg's manifest reader.

``table.inspect.entries()`` would do, but PyIceberg 0.12 raises ``TypeError: 'NoneType' object is not
iterable`` on a v3 table with deletion vectors (a DV has no column_sizes); the manifest reader itself
works on v3, though it drops the v3 fields first_row_id, referenced_data_file, content_offset and
content_size_in_bytes (its DataFile has the v2 fields only): take those from Spark
(:func:`tests.interop.spark.spark_metadata_table`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.table import Table

DATA, POSITION_DELETES, EQUALITY_DELETES = 0, 1, 2


@dataclass(frozen=True)
class ContentEntry:
    content: int  # 0 data, 1 position deletes (Parquet files or v3 Puffin DVs), 2 equality deletes
    spec_id: int
    partition: tuple[object, ...]
    file_path: str
    file_format: str  # PARQUET, AVRO, ORC, PUFFIN
    record_count: int
    sequence_number: int  # the data sequence number
    equality_ids: tuple[int, ...] | None


def live_entries(table: Table) -> list[ContentEntry]:
    """Every live (ADDED or EXISTING) entry of the current snapshot's data and delete manifests."""
    table.refresh()
    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    out = []
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            f = entry.data_file
            out.append(
                ContentEntry(
                    content=int(f.content.value),
                    spec_id=manifest.partition_spec_id,
                    partition=tuple(f.partition[i] for i in range(len(f.partition))),
                    file_path=f.file_path,
                    file_format=str(f.file_format.value),
                    record_count=f.record_count,
                    sequence_number=int(entry.sequence_number or 0),
                    equality_ids=tuple(f.equality_ids) if f.equality_ids else None,
                )
            )
    return out

"""Row ids of format-version 3 tables: ``first_row_id`` of manifests and data files, and the v3 manifest list.

PyIceberg 0.12 reads manifest lists and manifests with the v2 schema, which drops ``first_row_id``
(fields 520 and 142), and cannot write a v3 manifest list. This module, after Java 1.10:

- reads a manifest list in the v3 layout (:func:`read_manifest_list`), keeping ``first_row_id``;
- gives the data files of a manifest the ``first_row_id`` they inherit (:func:`inherit_first_row_ids`,
  Java's ``ManifestReader.idAssigner``): the manifest's ``first_row_id`` plus the running sum of
  ``record_count`` over the preceding files without one, DELETED entries skipped; every file-level id
  is null when the manifest has none;
- writes a v3 manifest list (:func:`write_manifest_list_v3`, Java's ``ManifestListWriter.V3Writer``):
  every data manifest without a ``first_row_id`` gets the running counter, which then grows by its
  ``added_rows_count + existing_rows_count``; the counter's growth is the snapshot's ``added-rows``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from copy import copy
from typing import TYPE_CHECKING

from pyiceberg.avro.codecs import AVRO_CODEC_KEY, AvroCompressionCodec
from pyiceberg.avro.file import AvroFile, AvroOutputFile
from pyiceberg.manifest import (
    DATA_FILE_TYPE,
    MANIFEST_LIST_FILE_SCHEMAS,
    UNASSIGNED_SEQ,
    DataFile,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    PartitionFieldSummary,
)

if TYPE_CHECKING:
    from pyiceberg.io import FileIO, OutputFile
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

__all__ = [
    "FIRST_ROW_ID_FIELD_ID",
    "assign_manifest_row_ids",
    "first_row_id",
    "inherit_first_row_ids",
    "manifest_first_row_id",
    "read_manifest_list",
    "snapshot_manifests",
    "with_manifest_first_row_id",
    "write_manifest_list_v3",
]

#: ``data_file.first_row_id`` and ``manifest_file.first_row_id``.
FIRST_ROW_ID_FIELD_ID = 142
_MANIFEST_FIRST_ROW_ID_FIELD_ID = 520

_FILE_POS = next(p for p, f in enumerate(DATA_FILE_TYPE[3].fields) if f.field_id == FIRST_ROW_ID_FIELD_ID)
_LIST_V3 = MANIFEST_LIST_FILE_SCHEMAS[3]
_MANIFEST_POS = next(
    p for p, f in enumerate(_LIST_V3.fields) if f.field_id == _MANIFEST_FIRST_ROW_ID_FIELD_ID
)


def first_row_id(data_file: DataFile) -> int | None:
    """The ``first_row_id`` of a data file in the v3 layout, ``None`` when null or not in the layout."""
    if len(data_file) <= _FILE_POS:
        return None
    value = data_file[_FILE_POS]
    return value if isinstance(value, int) else None


def _set_first_row_id(data_file: DataFile, value: int | None) -> None:
    data_file[_FILE_POS] = value


def manifest_first_row_id(manifest: ManifestFile) -> int | None:
    """The ``first_row_id`` of a manifest-list entry read in the v3 layout, else ``None``."""
    if len(manifest) <= _MANIFEST_POS:
        return None
    value = manifest[_MANIFEST_POS]
    return value if isinstance(value, int) else None


def with_manifest_first_row_id(manifest: ManifestFile, value: int | None) -> ManifestFile:
    """A copy of ``manifest`` in the v3 layout with ``first_row_id`` set to ``value``."""
    values = [manifest[pos] for pos in range(min(len(manifest), _MANIFEST_POS))]
    values += [None] * (_MANIFEST_POS - len(values))
    return ManifestFile(*values, value)


def read_manifest_list(io: FileIO, snapshot: Snapshot) -> list[ManifestFile]:
    """The manifests of ``snapshot`` in the v3 layout (``first_row_id`` kept; ``None`` in older lists)."""
    with AvroFile[ManifestFile](
        io.new_input(snapshot.manifest_list),
        _LIST_V3,
        read_types={-1: ManifestFile, 508: PartitionFieldSummary},
        read_enums={517: ManifestContent},
    ) as reader:
        return list(reader)


def snapshot_manifests(io: FileIO, metadata: TableMetadata, snapshot: Snapshot) -> list[ManifestFile]:
    """The manifests of ``snapshot``: in the v3 layout on a v3 table, as PyIceberg reads them otherwise."""
    return read_manifest_list(io, snapshot) if metadata.format_version >= 3 else list(snapshot.manifests(io))


def inherit_first_row_ids(
    entries: Iterable[ManifestEntry], manifest: ManifestFile
) -> Iterator[ManifestEntry]:
    """``entries`` (all of them, in file order, data files in the v3 layout) with inherited row ids.

    Only for a manifest read in the v3 layout: other manifests (v1 and v2 tables) pass unchanged.
    """
    if manifest.content != ManifestContent.DATA or len(manifest) <= _MANIFEST_POS:
        yield from entries
        return
    next_id = manifest_first_row_id(manifest)
    for entry in entries:
        data_file = entry.data_file
        if next_id is None:
            # Java nulls every file-level id of a manifest without one, explicit ones included.
            if len(data_file) > _FILE_POS:
                _set_first_row_id(data_file, None)
        elif entry.status != ManifestEntryStatus.DELETED and first_row_id(data_file) is None:
            _set_first_row_id(data_file, next_id)
            next_id += data_file.record_count
        yield entry


def _assign_sequence_numbers(manifest: ManifestFile, snapshot_id: int, sequence_number: int) -> ManifestFile:
    """As PyIceberg's v2 list writer: this commit's manifests get its sequence number."""
    if manifest.sequence_number != UNASSIGNED_SEQ and manifest.min_sequence_number != UNASSIGNED_SEQ:
        return manifest
    if manifest.added_snapshot_id != snapshot_id:
        raise ValueError(
            f"Found unassigned sequence number for a manifest from snapshot: {manifest.added_snapshot_id}"
        )
    assigned = copy(manifest)
    if assigned.sequence_number == UNASSIGNED_SEQ:
        assigned.sequence_number = sequence_number
    if assigned.min_sequence_number == UNASSIGNED_SEQ:
        assigned.min_sequence_number = sequence_number
    return assigned


def assign_manifest_row_ids(
    manifests: Sequence[ManifestFile], next_row_id: int
) -> tuple[list[ManifestFile], int]:
    """Give every data manifest without a ``first_row_id`` the running counter, from ``next_row_id``.

    :returns: the manifests in the v3 layout, and the counter after the last (``added-rows`` is its
        growth: the EXISTING rows of carried pre-upgrade manifests count too, as in Java).
    """
    counter = next_row_id
    assigned = []
    for manifest in manifests:
        current = manifest_first_row_id(manifest)
        if manifest.content == ManifestContent.DATA and current is None:
            assigned.append(with_manifest_first_row_id(manifest, counter))
            counter += (manifest.added_rows_count or 0) + (manifest.existing_rows_count or 0)
        else:
            assigned.append(with_manifest_first_row_id(manifest, current))
    return assigned, counter


def write_manifest_list_v3(
    output_file: OutputFile,
    manifests: Sequence[ManifestFile],
    *,
    snapshot_id: int,
    parent_snapshot_id: int | None,
    sequence_number: int,
    first_row_id: int,
    avro_compression: AvroCompressionCodec,
) -> int:
    """Write a format-version 3 manifest list; return the row-id counter after it.

    :param manifests: the snapshot's manifests; carried ones keep the ``first_row_id`` they were read with
        (:func:`read_manifest_list`), the others get one from the counter.
    :param first_row_id: the table's ``next-row-id``, which is the snapshot's ``first-row-id``.
    """
    numbered = [_assign_sequence_numbers(m, snapshot_id, sequence_number) for m in manifests]
    assigned, counter = assign_manifest_row_ids(numbered, first_row_id)
    metadata = {
        "snapshot-id": str(snapshot_id),
        "parent-snapshot-id": str(parent_snapshot_id) if parent_snapshot_id is not None else "null",
        "sequence-number": str(sequence_number),
        "first-row-id": str(first_row_id),
        "format-version": "3",
        AVRO_CODEC_KEY: avro_compression,
    }
    with AvroOutputFile[ManifestFile](
        output_file=output_file,
        file_schema=_LIST_V3,
        record_schema=_LIST_V3,
        schema_name="manifest_file",
        metadata=metadata,
    ) as writer:
        writer.write_block(assigned)
    return counter

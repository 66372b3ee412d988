"""The summary of a snapshot that adds and removes files, as Java's ``SnapshotProducer.summary()`` writes it.

PyIceberg's ``update_snapshot_summaries`` refuses a ``replace`` snapshot, so the commits build their
summary here: PyIceberg's ``SnapshotSummaryCollector`` for the per-file counts, Java's
``changed-partition-count`` and the ``total-*`` counts carried from the parent's summary.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pyiceberg.manifest import DataFile
from pyiceberg.table import TableProperties
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import (
    ADDED_DATA_FILES,
    ADDED_DELETE_FILES,
    ADDED_EQUALITY_DELETES,
    ADDED_FILE_SIZE,
    ADDED_POSITION_DELETE_FILES,
    ADDED_POSITION_DELETES,
    ADDED_RECORDS,
    CHANGED_PARTITION_COUNT_PROP,
    DELETED_DATA_FILES,
    DELETED_RECORDS,
    REMOVED_DELETE_FILES,
    REMOVED_EQUALITY_DELETES,
    REMOVED_FILE_SIZE,
    REMOVED_POSITION_DELETE_FILES,
    REMOVED_POSITION_DELETES,
    TOTAL_DATA_FILES,
    TOTAL_DELETE_FILES,
    TOTAL_EQUALITY_DELETES,
    TOTAL_FILE_SIZE,
    TOTAL_POSITION_DELETES,
    TOTAL_RECORDS,
    SnapshotSummaryCollector,
)
from pyiceberg.typedef import EMPTY_DICT

from airflow_provider_iceberg_exec.engine.commit.change import spec_id_of
from airflow_provider_iceberg_exec.engine.deletes.vectors import content_size, is_deletion_vector

__all__ = ["snapshot_summary_properties"]

# (total, added, removed) summary keys, in Java's SnapshotProducer.summary() order.
_TOTALS = (
    (TOTAL_RECORDS, ADDED_RECORDS, DELETED_RECORDS),
    (TOTAL_FILE_SIZE, ADDED_FILE_SIZE, REMOVED_FILE_SIZE),
    (TOTAL_DATA_FILES, ADDED_DATA_FILES, DELETED_DATA_FILES),
    (TOTAL_DELETE_FILES, ADDED_DELETE_FILES, REMOVED_DELETE_FILES),
    (TOTAL_POSITION_DELETES, ADDED_POSITION_DELETES, REMOVED_POSITION_DELETES),
    (TOTAL_EQUALITY_DELETES, ADDED_EQUALITY_DELETES, REMOVED_EQUALITY_DELETES),
)


def snapshot_summary_properties(
    metadata: TableMetadata,
    *,
    added: Iterable[DataFile],
    removed: Iterable[DataFile],
    previous: Mapping[str, str] | None,
    snapshot_properties: Mapping[str, str] = EMPTY_DICT,
) -> dict[str, str]:
    """The summary properties (all but ``operation``) of a snapshot that adds and removes files, as Java's.

    ``added-*`` / ``deleted-*`` / ``removed-*`` counts and sizes by content, per-partition summaries up to
    ``write.summary.partition-limit``, ``changed-partition-count`` (the unpartitioned "partition" counts,
    as in Java) and the ``total-*`` counts carried from the parent's summary.

    :param metadata: the table metadata the snapshot is committed on (schema and specs).
    :param added: files added (a file without ``spec_id`` is in the default spec).
    :param removed: files removed (data or delete files).
    :param previous: the parent snapshot's summary properties; ``None`` when there is no parent.
    :param snapshot_properties: extra properties, written over the counts, before the carried totals.
    """
    schema = metadata.schema()
    specs = metadata.specs()
    limit = int(
        metadata.properties.get(
            TableProperties.WRITE_PARTITION_SUMMARY_LIMIT,
            TableProperties.WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT,
        )
    )
    added, removed = list(added), list(removed)
    collector = SnapshotSummaryCollector(partition_summary_limit=limit)
    changed_partitions: set[str] = set()
    for data_file in added:
        spec = specs[spec_id_of(data_file, metadata.default_spec_id)]
        collector.add_file(data_file, schema=schema, partition_spec=spec)
        changed_partitions.add(spec.partition_to_path(data_file.partition, schema))
    for data_file in removed:
        spec = specs[spec_id_of(data_file, metadata.default_spec_id)]
        collector.remove_file(data_file, schema=schema, partition_spec=spec)
        changed_partitions.add(spec.partition_to_path(data_file.partition, schema))

    properties = collector.build()
    _count_deletion_vectors(properties, added, removed)
    # Java counts the unpartitioned "partition" too (key ""), PyIceberg's collector does not.
    properties[CHANGED_PARTITION_COUNT_PROP] = str(len(changed_partitions))
    properties.update(snapshot_properties)
    _add_totals(properties, previous)
    return properties


# Java's SnapshotSummary keys for deletion vectors (PyIceberg 0.12 has no constants for them).
ADDED_DVS = "added-dvs"
REMOVED_DVS = "removed-dvs"


def _count_deletion_vectors(
    properties: dict[str, str], added: list[DataFile], removed: list[DataFile]
) -> None:
    """Count DVs as Java's ``SnapshotSummary.UpdateMetrics`` does: under ``added-dvs``/``removed-dvs``
    instead of ``*-position-delete-files`` (still delete files with their positions), sized by their
    blob (``content_size_in_bytes``), not by the shared Puffin file PyIceberg's collector counts."""
    for files, dvs_key, files_key, size_key in (
        (added, ADDED_DVS, ADDED_POSITION_DELETE_FILES, ADDED_FILE_SIZE),
        (removed, REMOVED_DVS, REMOVED_POSITION_DELETE_FILES, REMOVED_FILE_SIZE),
    ):
        dvs = [f for f in files if is_deletion_vector(f)]
        if not dvs:
            continue
        properties[dvs_key] = str(len(dvs))
        _subtract(properties, files_key, len(dvs))
        _subtract(properties, size_key, sum(f.file_size_in_bytes - content_size(f) for f in dvs))


def _subtract(properties: dict[str, str], key: str, amount: int) -> None:
    value = int(properties.get(key, "0")) - amount
    if value > 0:
        properties[key] = str(value)
    else:
        properties.pop(key, None)


def _add_totals(properties: dict[str, str], previous: Mapping[str, str] | None) -> None:
    """Carry the ``total-*`` counts from the parent, as Java's SnapshotProducer and PyIceberg do."""
    if previous is None:
        previous = {total: "0" for total, _, _ in _TOTALS}
    for total, added, removed in _TOTALS:
        previous_total = previous.get(total)
        if previous_total is None:
            continue  # Java skips a total the parent did not have
        try:
            value = int(previous_total) + int(properties.get(added, "0")) - int(properties.get(removed, "0"))
        except ValueError:
            continue
        if value >= 0:
            properties[total] = str(value)

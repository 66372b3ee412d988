"""The summary of a snapshot that adds and removes files, as Java's ``SnapshotProducer.summary()`` writes it.

PyIceberg's ``update_snapshot_summaries`` refuses a ``replace`` snapshot, so the commits build their
summary here: PyIceberg's ``SnapshotSummaryCollector`` for the per-file counts, Java's
``changed-partition-count`` and the ``total-*`` counts carried from the parent's summary.

PyIceberg 0.12 counts a deletion vector as a position delete file of its Puffin's size; Java's
``SnapshotSummary.UpdateMetrics`` counts it under ``added-dvs`` / ``removed-dvs`` (not
``added-position-delete-files``), with its cardinality in ``added-position-deletes`` and its
``content_size_in_bytes`` in ``added-files-size``: :class:`_Metrics` does as Java.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Iterable, Mapping

from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import TableProperties
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import (
    ADDED_DATA_FILES,
    ADDED_DELETE_FILES,
    ADDED_EQUALITY_DELETES,
    ADDED_FILE_SIZE,
    ADDED_POSITION_DELETES,
    ADDED_RECORDS,
    CHANGED_PARTITION_COUNT_PROP,
    DELETED_DATA_FILES,
    DELETED_RECORDS,
    REMOVED_DELETE_FILES,
    REMOVED_EQUALITY_DELETES,
    REMOVED_FILE_SIZE,
    REMOVED_POSITION_DELETES,
    TOTAL_DATA_FILES,
    TOTAL_DELETE_FILES,
    TOTAL_EQUALITY_DELETES,
    TOTAL_FILE_SIZE,
    TOTAL_POSITION_DELETES,
    TOTAL_RECORDS,
    SnapshotSummaryCollector,
    UpdateMetrics,
)
from pyiceberg.typedef import EMPTY_DICT

from airflow_provider_iceberg_exec.engine.commit.change import spec_id_of
from airflow_provider_iceberg_exec.engine.deletes.vectors import content_size, is_deletion_vector

__all__ = ["SummaryCounts", "snapshot_summary_properties"]

ADDED_DVS, REMOVED_DVS = "added-dvs", "removed-dvs"

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
    counts = SummaryCounts(metadata)
    for data_file in added:
        counts.add(data_file)
    for data_file in removed:
        counts.remove(data_file)
    return counts.properties(previous, snapshot_properties)


class SummaryCounts:
    """The counts of :func:`snapshot_summary_properties`, taken one file at a time: a commit counts the
    files it removes as it streams their manifests, and keeps none of them."""

    def __init__(self, metadata: TableMetadata) -> None:
        self._schema = metadata.schema()
        self._specs = metadata.specs()
        self._default_spec_id = metadata.default_spec_id
        limit = int(
            metadata.properties.get(
                TableProperties.WRITE_PARTITION_SUMMARY_LIMIT,
                TableProperties.WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT,
            )
        )
        self._collector = SnapshotSummaryCollector(partition_summary_limit=limit)
        self._collector.metrics = _Metrics()
        self._collector.partition_metrics = defaultdict(_Metrics)
        self._changed_partitions: set[str] = set()

    def add(self, data_file: DataFile) -> None:
        spec = self._specs[spec_id_of(data_file, self._default_spec_id)]
        self._collector.add_file(data_file, schema=self._schema, partition_spec=spec)
        self._changed_partitions.add(_partition_path(spec, data_file, self._schema))

    def remove(self, data_file: DataFile) -> None:
        spec = self._specs[spec_id_of(data_file, self._default_spec_id)]
        self._collector.remove_file(data_file, schema=self._schema, partition_spec=spec)
        self._changed_partitions.add(_partition_path(spec, data_file, self._schema))

    def copy(self) -> SummaryCounts:
        """An independent copy (an attempt's removed files, to which each summary adds the added ones)."""
        twin = copy.copy(self)
        twin._collector = copy.deepcopy(self._collector)
        twin._changed_partitions = set(self._changed_partitions)
        return twin

    def properties(
        self, previous: Mapping[str, str] | None, snapshot_properties: Mapping[str, str] = EMPTY_DICT
    ) -> dict[str, str]:
        """The summary properties; see :func:`snapshot_summary_properties`."""
        properties = self._collector.build()
        # Java counts the unpartitioned "partition" too (key ""), PyIceberg's collector does not.
        properties[CHANGED_PARTITION_COUNT_PROP] = str(len(self._changed_partitions))
        properties.update(snapshot_properties)
        _add_totals(properties, previous)
        return properties


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


class _Metrics(UpdateMetrics):
    """PyIceberg's per-file counts with deletion vectors counted as Java's ``SnapshotSummary`` does."""

    def __init__(self) -> None:
        super().__init__()
        self.added_dvs = 0
        self.removed_dvs = 0

    def add_file(self, data_file: DataFile) -> None:
        super().add_file(data_file)
        if is_deletion_vector(data_file):
            self.added_dvs += 1
            self.added_pos_delete_files -= 1
            self.added_file_size += content_size(data_file) - data_file.file_size_in_bytes

    def remove_file(self, data_file: DataFile) -> None:
        super().remove_file(data_file)
        if is_deletion_vector(data_file):
            self.removed_dvs += 1
            self.removed_pos_delete_files -= 1
            self.removed_file_size += content_size(data_file) - data_file.file_size_in_bytes

    def to_dict(self) -> dict[str, str]:
        """Java's key order: the DV counts follow the position delete file counts."""
        properties = super().to_dict()
        dvs = {k: str(v) for k, v in ((ADDED_DVS, self.added_dvs), (REMOVED_DVS, self.removed_dvs)) if v > 0}
        ordered: dict[str, str] = {}
        for key, value in properties.items():
            if dvs and key in (ADDED_DELETE_FILES, REMOVED_DELETE_FILES):
                ordered.update(dvs)
                dvs = {}
            ordered[key] = value
        return ordered


def _partition_path(spec: PartitionSpec, data_file: DataFile, schema: Schema) -> str:
    """``spec.partition_to_path``; ``""`` for an unpartitioned spec without building its partition type
    (once per file of a commit: a compaction of many small files removes tens of thousands)."""
    return "" if spec.is_unpartitioned() else spec.partition_to_path(data_file.partition, schema)

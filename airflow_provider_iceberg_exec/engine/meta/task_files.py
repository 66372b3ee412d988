"""A task's data files as JSON: each data file with the delete files that apply to it. Shared by the
compaction and copy-on-write planners and tasks."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, overload

from airflow_provider_iceberg_exec.engine.meta.datafile_json import (
    content_of_json,
    data_file_from_json,
    data_file_to_json,
)
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete, ScannedFile

if TYPE_CHECKING:
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.typedef import Record

__all__ = [
    "FileCounts",
    "TaskFiles",
    "has_equality_deletes",
    "scanned_from_json",
    "scanned_to_json",
]


def scanned_to_json(
    scanned: ScannedFile, specs: Mapping[int, PartitionSpec], schema: Schema, *, metrics: bool = True
) -> dict[str, Any]:
    """A task entry: ``{"data-file", "data-sequence-number", "delete-files": [{"content-file", ...}]}``.

    :param metrics: write the data file's column metrics (:func:`.data_file_to_json`); a task that only
        reads and replaces the file passes ``False``. Delete files are always written whole.
    """
    data_file = scanned.data_file
    return {
        "data-file": data_file_to_json(data_file, specs[data_file.spec_id], schema, metrics=metrics),
        "data-sequence-number": scanned.data_sequence_number,
        "delete-files": [
            {
                "content-file": data_file_to_json(d.data_file, specs[d.data_file.spec_id], schema),
                "data-sequence-number": d.data_sequence_number,
            }
            for d in scanned.delete_files
        ],
    }


def has_equality_deletes(scanned: ScannedFile) -> bool:
    """Whether an equality delete file applies to ``scanned``."""
    from pyiceberg.manifest import DataFileContent

    return any(d.data_file.content == DataFileContent.EQUALITY_DELETES for d in scanned.delete_files)


def scanned_from_json(
    entry: Mapping[str, Any],
    specs: Mapping[int, PartitionSpec],
    schema: Schema,
    *,
    metrics: bool = True,
    partitions: dict[tuple[int, str], Record] | None = None,
) -> ScannedFile:
    """A task's input file with the delete files that apply to it, as :func:`scanned_to_json` wrote it.

    :param metrics: decode the data file's column metrics (:func:`.data_file_from_json`); a task that only
        reads the file passes ``False``. Delete files are always decoded whole.
    :param partitions: partition records to share (:func:`.data_file_from_json`).
    """
    return ScannedFile(
        data_file=data_file_from_json(
            entry["data-file"], specs, schema, metrics=metrics, partitions=partitions
        ),
        data_sequence_number=int(entry.get("data-sequence-number") or 0),
        delete_files=tuple(
            ScannedDelete(
                data_file_from_json(d["content-file"], specs, schema, partitions=partitions),
                int(d.get("data-sequence-number") or 0),
            )
            for d in entry.get("delete-files", [])
        ),
    )


class FileCounts(NamedTuple):
    """What cutting a group into lanes reads of one input file."""

    record_count: int
    file_size_in_bytes: int
    #: the record counts of the delete files that apply to it, summed (a delete file may hold other files')
    delete_records: int
    has_equality_deletes: bool

    @classmethod
    def of(cls, scanned: ScannedFile) -> FileCounts:
        data_file = scanned.data_file
        return cls(
            data_file.record_count,
            data_file.file_size_in_bytes,
            sum(d.data_file.record_count for d in scanned.delete_files),
            has_equality_deletes(scanned),
        )


class TaskFiles(Sequence[ScannedFile]):
    """A task's ``data_files`` entries as :class:`ScannedFile`, decoded each time one is asked for.

    A rewrite passes over its inputs a few times (sizes, lanes, the read); holding them decoded took about
    500 bytes a file beside the entries (250 MB for a group of 500,000 small files), and decoding one
    again costs about 15 us.
    """

    def __init__(
        self,
        entries: Sequence[Mapping[str, Any]],
        specs: Mapping[int, PartitionSpec],
        schema: Schema,
        *,
        metrics: bool = True,
        partitions: dict[tuple[int, str], Record] | None = None,
    ) -> None:
        self._entries, self._specs, self._schema, self._metrics = entries, specs, schema, metrics
        # The files of one partition share its record (slices too): decoding it was 40 % of an
        # unpartitioned file's.
        self._partitions: dict[tuple[int, str], Record] = {} if partitions is None else partitions

    def __len__(self) -> int:
        return len(self._entries)

    @overload
    def __getitem__(self, index: int) -> ScannedFile: ...

    @overload
    def __getitem__(self, index: slice) -> TaskFiles: ...

    def __getitem__(self, index: int | slice) -> ScannedFile | TaskFiles:
        if isinstance(index, slice):
            return TaskFiles(
                self._entries[index],
                self._specs,
                self._schema,
                metrics=self._metrics,
                partitions=self._partitions,
            )
        return self._decode(self._entries[index])

    def _decode(self, entry: Mapping[str, Any]) -> ScannedFile:
        return scanned_from_json(
            entry, self._specs, self._schema, metrics=self._metrics, partitions=self._partitions
        )

    def __iter__(self) -> Iterator[ScannedFile]:
        for entry in self._entries:
            yield self._decode(entry)

    def counts(self) -> Iterator[FileCounts]:
        """Each file's :class:`FileCounts`, read off its entry without decoding it (the task's checks
        made the counts integers): equal to ``FileCounts.of`` of the decoded file, at a tenth of the cost."""
        from pyiceberg.manifest import DataFileContent

        for entry in self._entries:
            data_file = entry["data-file"]
            deletes = [d["content-file"] for d in entry.get("delete-files") or ()]
            yield FileCounts(
                data_file["record-count"],
                data_file["file-size-in-bytes"],
                sum(d["record-count"] for d in deletes),
                any(content_of_json(d) == DataFileContent.EQUALITY_DELETES for d in deletes),
            )

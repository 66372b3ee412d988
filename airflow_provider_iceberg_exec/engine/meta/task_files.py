"""A task's data files as JSON: each data file with the delete files that apply to it, and which delete
files a group of them leaves dangling. Shared by the compaction and copy-on-write planners and tasks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.meta.datafile_json import data_file_from_json, data_file_to_json
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete, ScannedFile

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema

__all__ = [
    "delete_targets",
    "has_equality_deletes",
    "removable_deletes",
    "scanned_from_json",
    "scanned_to_json",
]


def scanned_to_json(
    scanned: ScannedFile, specs: Mapping[int, PartitionSpec], schema: Schema
) -> dict[str, Any]:
    """A task entry: ``{"data-file", "data-sequence-number", "delete-files": [{"content-file", ...}]}``."""
    data_file = scanned.data_file
    return {
        "data-file": data_file_to_json(data_file, specs[data_file.spec_id], schema),
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
    entry: Mapping[str, Any], specs: Mapping[int, PartitionSpec], schema: Schema
) -> ScannedFile:
    """A task's input file with the delete files that apply to it, as :func:`scanned_to_json` wrote it."""
    return ScannedFile(
        data_file=data_file_from_json(entry["data-file"], specs, schema),
        data_sequence_number=int(entry.get("data-sequence-number") or 0),
        delete_files=tuple(
            ScannedDelete(
                data_file_from_json(d["content-file"], specs, schema), int(d.get("data-sequence-number") or 0)
            )
            for d in entry.get("delete-files", [])
        ),
    )


def delete_targets(scanned: Sequence[ScannedFile]) -> dict[str, tuple[ScannedDelete, set[str]]]:
    """For each live delete file, the live data files it applies to."""
    targets: dict[str, tuple[ScannedDelete, set[str]]] = {}
    for data in scanned:
        for delete in data.delete_files:
            targets.setdefault(delete.data_file.file_path, (delete, set()))[1].add(data.data_file.file_path)
    return targets


def removable_deletes(
    files: Sequence[ScannedFile],
    applies_to: Mapping[str, tuple[ScannedDelete, set[str]]],
    specs: Mapping[int, PartitionSpec],
    schema: Schema,
) -> list[dict[str, Any]]:
    """Delete files that apply only to files of this group: dangling once the group is rewritten.

    This covers the DVs and file-scoped position deletes of the rewritten files. A delete file that also
    applies to a file of another group (or one left out of the plan) stays; left behind, it can no longer
    match the rewritten rows (new paths; data sequence number not below an equality delete's).
    """
    paths = {f.data_file.file_path for f in files}
    removable: dict[str, DataFile] = {}
    for data in files:
        for delete in data.delete_files:
            path = delete.data_file.file_path
            if path in applies_to and applies_to[path][1] <= paths:
                removable[path] = delete.data_file
    return [data_file_to_json(d, specs[d.spec_id], schema) for _, d in sorted(removable.items())]

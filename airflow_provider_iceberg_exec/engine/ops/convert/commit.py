"""Committing a conversion: one ``replace`` that removes the converted equality deletes and adds positions.

Nothing the results say about safety is taken on trust; the commit re-derives it from the table at the
planning snapshot:

- an equality delete is removed only when every live data file it applied to was examined by a result
  that matched that very delete (Amoro's "reserved" rule); the others stay, and the positions written
  for them are harmless duplicates;
- a merged (file-scoped) position delete file is removed only when it is live, applied to the one data
  file the result examined, and every one of its positions is in the new files;
- every added file is read back: it must be a position delete file of the table's locations, of the
  size and record count claimed, naming only examined data files of its own spec and partition.

Sequence numbers (docs/maintenance.md): each new file gets the largest data sequence number of the
deletes it replaces for the data files it names (the converted equality deletes that applied to them
and the merged position deletes): Java's ``RewriteFiles.addFile(file, seq)`` rule. Any number at or
above a data file's applies a position delete to it, and positions name their data files by path, so no
data file written later is reached. Validation (:func:`~.commit.snapshots.commit_delete_rewrite`):
the removed deletes still live, the data files with converted positions still live and without a new
delete since the plan.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.commit.change import file_identity
from airflow_provider_iceberg_exec.engine.commit.cleanup import delete_unreferenced
from airflow_provider_iceberg_exec.engine.commit.snapshots import SequencedDelete, commit_delete_rewrite
from airflow_provider_iceberg_exec.engine.commit.verification import verify_added_files
from airflow_provider_iceberg_exec.engine.contracts import CONVERT_RESULT, ConvertResult
from airflow_provider_iceberg_exec.engine.deletes.vectors import (
    content_size,
    is_deletion_vector,
    read_deletion_vector,
)
from airflow_provider_iceberg_exec.engine.documents import check_base_snapshot, check_convert_task_result
from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError
from airflow_provider_iceberg_exec.engine.io.catalog import refresh_table, table_name
from airflow_provider_iceberg_exec.engine.meta.datafile_json import data_file_from_json
from airflow_provider_iceberg_exec.engine.meta.manifests import referenced_data_file
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedFile, scan_snapshot
from airflow_provider_iceberg_exec.engine.ops.convert.task import merged_position_deletes

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

__all__ = ["commit_conversion", "empty_convert_result"]

log = logging.getLogger(__name__)


def empty_convert_result(table: str) -> ConvertResult:
    """A conversion that converted nothing.

    >>> empty_convert_result("ns.t")["converted_equality_delete_files_count"]
    0
    """
    return ConvertResult(
        schema=CONVERT_RESULT,
        table=table,
        converted_equality_delete_files_count=0,
        added_position_delete_files_count=0,
        removed_position_delete_files_count=0,
        matched_rows_count=0,
        added_bytes_count=0,
        kept_equality_delete_files=[],
        snapshot_ids=[],
        already_committed=False,
        peak_rss_bytes=0,
        spilled_bytes=0,
    )


@dataclass
class _Base:
    """The table at the planning snapshot, as the commit needs it."""

    files: dict[str, ScannedFile]
    #: equality delete path -> the data files it applies to
    targets: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    deletes: dict[str, Any] = field(default_factory=dict)


def commit_conversion(
    table: Table,
    results: Sequence[Mapping[str, Any]],
    *,
    commit_id: str,
) -> ConvertResult:
    """Commit conversion results (all of one plan) as one ``replace`` snapshot, idempotently.

    Equality deletes the plan found applying to no data file (``dangling_equality_delete_files`` of a
    result) are removed if that holds at the planning snapshot.

    :raises DataFileCodecError: for a bad result, or one that does not match the table.
    :raises CommitValidationError: when the table changed in a conflicting way since the plan (re-plan).
    :raises CommitConflictError: when the catalog kept rejecting the commit (retry later).
    :raises CommitStateUnknownError: when the catalog's answer is unknown.
    """
    docs = [check_convert_task_result(r) for r in results]
    name = table_name(table)
    if not docs:
        return empty_convert_result(name)
    bases = {d["base_snapshot_id"] for d in docs}
    if len(bases) != 1 or {d["table"] for d in docs} != {name} or len({d["branch"] for d in docs}) != 1:
        raise DataFileCodecError(
            "conversion results belong to several tables, branches or plans; commit each plan alone"
        )
    refresh_table(table)
    base_id = bases.pop()
    check_base_snapshot(table.metadata, base_id)
    base = _base_state(table, base_id)
    added = [_added_file(table, d, f) for d in docs for f in d["added_delete_files"]]
    verify_added_files(table, [f for f, _paths in added])
    named = _check_named(docs, base, added)
    dangling = {p for d in docs for p in d["dangling_equality_delete_files"]}
    removed_eq, kept = _covered_deletes(docs, base, sorted(dangling))
    merged = _merged_deletes(table, docs, base, added, named)
    replaced_dvs = _replaced_dvs(table, docs, base, added)
    sequenced = [
        # v3: a DV takes the new commit's sequence number, above its data file's (reference 5.4)
        SequencedDelete(
            f, None if is_deletion_vector(f) else _sequence_number(paths, base, removed_eq | set(merged))
        )
        for f, paths in added
    ]
    removed = [
        *(base.deletes[p] for p in sorted(removed_eq)),
        *(merged[p] for p in sorted(merged)),
        *replaced_dvs,
    ]
    result = empty_convert_result(name)
    result["kept_equality_delete_files"] = sorted(kept)
    result["matched_rows_count"] = sum(d["matched_rows"] for d in docs)
    result["peak_rss_bytes"] = max(d["peak_rss_bytes"] for d in docs)
    result["spilled_bytes"] = max(d["spilled_bytes"] for d in docs)
    if not removed:
        # Positions of deletes that stay would only duplicate them: the written files go.
        log.info("nothing to commit: no equality delete of %s was fully converted", name)
        paths = sorted({f.file_path for f, _ in added})  # a Puffin holds many DVs
        delete_unreferenced(table, paths, what="positions of unconverted deletes")
        return result
    outcome = commit_delete_rewrite(
        table,
        base_snapshot_id=base_id,
        removed_delete_files=removed,
        added_delete_files=sequenced,
        required_data_files=[base.files[p].data_file for p in sorted(named)],
        commit_id=commit_id,
        branch=docs[0]["branch"],
    )
    result["converted_equality_delete_files_count"] = len(removed_eq)
    result["added_position_delete_files_count"] = len(sequenced)
    result["removed_position_delete_files_count"] = len(merged) + len(replaced_dvs)
    result["added_bytes_count"] = sum(content_size(f) for f, _ in added)
    result["snapshot_ids"] = [outcome.snapshot_id]
    result["already_committed"] = outcome.already_committed
    return result


def _base_state(table: Table, snapshot_id: int) -> _Base:
    from pyiceberg.manifest import DataFileContent

    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    assert snapshot is not None  # checked by check_base_snapshot
    scanned = scan_snapshot(table.io, table.metadata, snapshot)
    base = _Base(files={f.data_file.file_path: f for f in scanned.data_files})
    base.deletes = {d.data_file.file_path: d.data_file for d in scanned.delete_files}
    for f in scanned.data_files:
        for d in f.delete_files:
            if d.data_file.content == DataFileContent.EQUALITY_DELETES:
                base.targets[d.data_file.file_path].add(f.data_file.file_path)
    return base


def _added_file(table: Table, doc: Mapping[str, Any], entry: Mapping[str, Any]) -> tuple[DataFile, set[str]]:
    """Decode one added position delete file and read the data file paths it names."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyiceberg.manifest import DataFileContent

    metadata = table.metadata
    delete_file = data_file_from_json(entry, metadata.specs(), metadata.schema())
    if delete_file.content != DataFileContent.POSITION_DELETES:
        raise DataFileCodecError(
            f"task {doc['task_id']}: added file {delete_file.file_path} is not a position delete file"
        )
    if is_deletion_vector(delete_file):
        target = referenced_data_file(delete_file)
        if target is None:
            raise DataFileCodecError(f"added DV {delete_file.file_path} has no referenced_data_file")
        _positions(table, delete_file, target)  # readable, and as many positions as claimed
        return delete_file, {target}
    paths: set[str] = set()
    try:
        with table.io.new_input(delete_file.file_path).open() as stream:
            # Batch by batch, the paths kept dictionary-encoded: a file may hold millions of positions.
            parquet = pq.ParquetFile(stream, read_dictionary=["file_path"])
            for batch in parquet.iter_batches(columns=["file_path"], use_threads=False):
                paths.update(str(p) for p in pc.unique(batch.column(0).dictionary_decode()).to_pylist())
    except (FileNotFoundError, OSError, KeyError, ValueError) as err:
        raise DataFileCodecError(
            f"added file {delete_file.file_path} is not a readable position delete file: {err}"
        ) from err
    return delete_file, paths


def _check_named(
    docs: Sequence[Mapping[str, Any]], base: _Base, added: Sequence[tuple[DataFile, set[str]]]
) -> set[str]:
    """Every path an added file names is a data file its task examined, live at the base, of its partition."""
    examined = {p for d in docs for p in d["data_files"]}
    named: set[str] = set()
    for delete_file, paths in added:
        for path in paths:
            scanned = base.files.get(path)
            if path not in examined or scanned is None:
                raise DataFileCodecError(
                    f"added file {delete_file.file_path} names {path}, which no task examined at the "
                    "base snapshot"
                )
            data_file = scanned.data_file
            if data_file.spec_id != delete_file.spec_id or data_file.partition != delete_file.partition:
                raise DataFileCodecError(
                    f"added file {delete_file.file_path} names {path} of another partition than its own"
                )
        named |= paths
    return named


def _covered_deletes(
    docs: Sequence[Mapping[str, Any]], base: _Base, dangling: Sequence[str]
) -> tuple[set[str], set[str]]:
    """The equality deletes every data file of which was examined against them, and the others."""
    from pyiceberg.manifest import DataFileContent

    examined: dict[str, set[str]] = defaultdict(set)  # delete -> data files matched against it
    for doc in docs:
        deletes = set(doc["equality_delete_files"])
        for path in doc["data_files"]:
            scanned = base.files.get(path)
            if scanned is None:
                raise DataFileCodecError(
                    f"task {doc['task_id']} examined {path}, not live at the base snapshot"
                )
            applying = {
                d.data_file.file_path
                for d in scanned.delete_files
                if d.data_file.content == DataFileContent.EQUALITY_DELETES
            }
            for delete in deletes & applying:
                examined[delete].add(path)
    claimed = {p for d in docs for p in d["equality_delete_files"]} | set(dangling)
    covered: set[str] = set()
    kept: set[str] = set()
    for delete in claimed:
        live = base.deletes.get(delete)
        if live is None or live.content != DataFileContent.EQUALITY_DELETES:
            raise DataFileCodecError(f"{delete} is not a live equality delete file at the base snapshot")
        (covered if base.targets.get(delete, set()) <= examined[delete] else kept).add(delete)
    return covered, kept


def _merged_deletes(
    table: Table,
    docs: Sequence[Mapping[str, Any]],
    base: _Base,
    added: Sequence[tuple[DataFile, set[str]]],
    named: set[str],
) -> dict[str, DataFile]:
    """The merged position delete files, each proven folded in: a file-scoped delete of a named data
    file, every one of its positions in the new files that name that data file (read back, compared)."""
    import numpy as np

    from airflow_provider_iceberg_exec.engine.deletes.positions import read_position_deletes

    claimed = {p for d in docs for p in d["merged_position_delete_files"]}
    owners: dict[str, ScannedFile] = {}
    for path in named:
        for d in merged_position_deletes(base.files[path]):
            owners.setdefault(d.data_file.file_path, base.files[path])
    if stray := sorted(claimed - owners.keys()):
        raise DataFileCodecError(
            f"merged position delete {stray[0]} is not a file-scoped delete of a converted data file"
        )
    for path in sorted(claimed):
        owner = owners[path].data_file.file_path
        if any(is_deletion_vector(d.data_file) for d in owners[path].delete_files):
            continue  # readers ignore it for the owner's DV (spec "Scan Planning"): dropping it is safe
        old = read_position_deletes(table.io, _delete_of(owners[path], path), owner)
        new = [_positions(table, f, owner) for f, paths in added if owner in paths]
        if not np.isin(old, np.concatenate(new)).all():
            raise DataFileCodecError(
                f"merged position delete {path} has positions of {owner} that the new files lack"
            )
    return {p: base.deletes[p] for p in sorted(claimed)}


def _positions(table: Table, delete_file: DataFile, owner: str) -> npt.NDArray[np.int64]:
    """The positions of ``owner`` in a new delete file: a DV's (read and checked), a Parquet file's rows."""
    from airflow_provider_iceberg_exec.engine.deletes.positions import read_position_deletes
    from airflow_provider_iceberg_exec.engine.errors import DataFileReadError

    if not is_deletion_vector(delete_file):
        return read_position_deletes(table.io, delete_file, owner)
    try:
        return read_deletion_vector(table.io, delete_file)
    except (DataFileReadError, OSError, ValueError) as err:
        raise DataFileCodecError(f"added DV {delete_file.file_path} is not readable: {err}") from err


def _replaced_dvs(
    table: Table,
    docs: Sequence[Mapping[str, Any]],
    base: _Base,
    added: Sequence[tuple[DataFile, set[str]]],
) -> list[DataFile]:
    """v3: the old DVs the new ones replace, each proven: the live DV at the base of a data file that gets
    a new DV, every one of its positions in the new DV (read back, compared). Removed by identity."""
    import numpy as np

    metadata = table.metadata
    new_dvs = {next(iter(paths)): f for f, paths in added if is_deletion_vector(f)}
    replaced: list[DataFile] = []
    for doc in docs:
        for entry in doc.get("rewritten_delete_files", []):
            claimed = data_file_from_json(entry, metadata.specs(), metadata.schema())
            if not is_deletion_vector(claimed):
                continue  # a file-scoped position file: in merged_position_delete_files, checked there
            owner = referenced_data_file(claimed)
            scanned = base.files.get(owner) if owner is not None else None
            live = [
                d.data_file
                for d in (scanned.delete_files if scanned is not None else [])
                if file_identity(d.data_file) == file_identity(claimed)
            ]
            if owner is None or not live or owner not in new_dvs:
                raise DataFileCodecError(
                    f"rewritten DV {claimed.file_path} is not the live DV at the base of a data file with a "
                    "new DV"
                )
            old = read_deletion_vector(table.io, live[0])
            if not np.isin(old, read_deletion_vector(table.io, new_dvs[owner])).all():
                raise DataFileCodecError(
                    f"rewritten DV {claimed.file_path} has positions the new DV of {owner} lacks"
                )
            replaced.append(live[0])
    return replaced


def _delete_of(scanned: ScannedFile, path: str) -> DataFile:
    return next(d.data_file for d in scanned.delete_files if d.data_file.file_path == path)


def _sequence_number(paths: set[str], base: _Base, replaced: set[str]) -> int:
    """The largest data sequence number of the replaced deletes that applied to the data files named."""
    numbers = [
        d.data_sequence_number
        for path in paths
        for d in base.files[path].delete_files
        if d.data_file.file_path in replaced
    ]
    floor = max(base.files[path].data_sequence_number for path in paths)
    return max([floor, *numbers])

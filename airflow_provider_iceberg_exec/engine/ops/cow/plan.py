"""Planning a copy-on-write: which data files may hold a matching row, which of them go unread, and how
files are packed into tasks. Reads metadata only (manifests, and the footers of the files to load).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from airflow_provider_iceberg_exec.engine.commit.snapshots import IsolationLevel
from airflow_provider_iceberg_exec.engine.contracts import COW_PLAN, COW_TASK, CowPlan, CowSourceFile, CowTask
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.io.catalog import refresh_table, table_name
from airflow_provider_iceberg_exec.engine.meta.format_versions import check_writable_format
from airflow_provider_iceberg_exec.engine.meta.scan import check_branch, scan_data_files
from airflow_provider_iceberg_exec.engine.meta.task_files import (
    scanned_to_json,
)
from airflow_provider_iceberg_exec.engine.ops.cow.common import parse_operation
from airflow_provider_iceberg_exec.engine.ops.cow.predicate import Predicate
from airflow_provider_iceberg_exec.engine.ops.cow.read import Source, inspect_source
from airflow_provider_iceberg_exec.engine.ops.cow.update import check_expressions, parse_assignments

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

__all__ = ["DEFAULT_TASK_SIZE_BYTES", "plan_cow_rewrite"]

log = logging.getLogger(__name__)

#: input bytes (of files to read, and of Parquet files to load) per task; tasks map to Airflow tasks
DEFAULT_TASK_SIZE_BYTES = 1 << 30

# Java's TableProperties. An overwrite by predicate deletes the rows matching it before it appends: it
# follows the delete level (Spark has no table property for INSERT OVERWRITE).
_ISOLATION_PROPERTIES = {
    "delete": "write.delete.isolation-level",
    "update": "write.update.isolation-level",
    "overwrite": "write.delete.isolation-level",
}


class _Common(TypedDict):
    """The keys the plan and each of its tasks share."""

    table: str
    branch: str
    operation: str
    where: str
    set: dict[str, str] | None
    base_snapshot_id: int | None
    schema_id: int
    isolation_level: str
    output_spec_id: int


def plan_cow_rewrite(
    table: Table,
    *,
    operation: str,
    where: str,
    set_columns: Mapping[str, str] | None = None,
    source_files: Sequence[str] = (),
    branch: str = "main",
    isolation_level: str | None = None,
    task_size_bytes: int = DEFAULT_TASK_SIZE_BYTES,
) -> CowPlan:
    """Plan a copy-on-write ``delete``, ``update`` or ``overwrite`` of the rows matching ``where``.

    Reads metadata only (manifests, and the footers of ``source_files``). Nothing is written.

    .. code-block:: python

        plan = plan_cow_rewrite(table, operation="update", where="region = 'eu'",
                                set_columns={"amount": "amount * 1.1"})

    :param operation: ``delete``, ``update`` or ``overwrite``.
    :param where: the predicate, in PyIceberg's row-filter syntax, e.g. ``"user_id = 42"``.
    :param set_columns: for ``update``: ``{column: SQL expression}`` evaluated by DataFusion over the row,
        e.g. ``{"amount": "amount * 1.1"}`` (quote mixed-case column names: ``"Amount"``).
    :param source_files: for ``overwrite``: Parquet files (any location the table's FileIO reads) whose rows
        replace the matching rows; every one of them must match ``where``.
    :param branch: the branch.
    :param isolation_level: ``serializable`` or ``snapshot``; default the table's
        ``write.delete.isolation-level`` (``write.update.isolation-level`` for ``update``), else
        ``serializable``.
    :param task_size_bytes: bytes to read per task (one Airflow task each when mapped).
    :returns: the plan document (``iceberg-exec/cow-plan@1``); its ``tasks`` feed
        :func:`~.cow.task.execute_cow_task`.
    :raises ConfigurationError: for a bad operation, predicate, assignment, source file or isolation level;
        for a format-version 3 table.
    """
    kind = parse_operation(operation)
    refresh_table(table)
    metadata = table.metadata
    _check_table(metadata, task_size_bytes)
    schema = metadata.schema()
    predicate = Predicate(where, schema)
    level = _isolation_level(kind, isolation_level, metadata.properties)
    assignments = _assignments(kind, schema, set_columns)
    sources = _sources(table, kind, source_files)
    check_branch(metadata, branch, table_name(table))
    snapshot = table.snapshot_by_name(branch)
    common: _Common = {
        "table": table_name(table),
        "branch": branch,
        "operation": kind,
        "where": predicate.text,
        "set": assignments,
        "base_snapshot_id": snapshot.snapshot_id if snapshot is not None else None,
        "schema_id": schema.schema_id,
        "isolation_level": level.value,
        "output_spec_id": metadata.default_spec_id,
    }
    entries = _entries(table, snapshot, predicate, kind) if snapshot is not None else []
    dropped = sum(1 for entry in entries if entry["all-rows-match"])
    tasks = _tasks(common, entries, sources, task_size_bytes)
    log.info(
        "planned %s of %s at snapshot %s: %d data file(s) may match (%d removed without reading), "
        "%d file(s) to load, %d task(s)",
        kind,
        common["table"],
        common["base_snapshot_id"],
        len(entries),
        dropped,
        len(sources),
        len(tasks),
    )
    return {
        "schema": COW_PLAN,
        **common,
        "tasks": tasks,
        "candidate_data_files_count": len(entries),
        "dropped_without_reading_count": dropped,
        "source_files_count": len(sources),
    }


def check_cow_format(metadata: TableMetadata) -> None:
    """Refuse a format version copy-on-write cannot commit to (above 3; v3 carries row lineage).

    :raises ConfigurationError: in one line; the table is not touched.
    """
    check_writable_format(metadata, "the table")


def _check_table(metadata: TableMetadata, task_size_bytes: int) -> None:
    """Refuse a table this rewrite cannot commit to, and a task size that packs nothing."""
    check_cow_format(metadata)
    if task_size_bytes <= 0:
        raise ConfigurationError("task_size_bytes must be > 0")


def _isolation_level(kind: str, explicit: str | None, properties: Mapping[str, str]) -> IsolationLevel:
    """The explicit level, else the table's property for ``kind`` (as Java's), else serializable."""
    if explicit is not None and str(explicit).strip():
        return IsolationLevel.parse(explicit)
    name = _ISOLATION_PROPERTIES[kind]
    value = properties.get(name, IsolationLevel.SERIALIZABLE.value)
    try:
        return IsolationLevel.parse(value)
    except ConfigurationError as err:
        raise ConfigurationError(f"table property {name}={value!r}: {err}") from err


def _assignments(kind: str, schema: Schema, set_columns: Mapping[str, str] | None) -> dict[str, str] | None:
    """An update's checked ``{column: expression}`` (``None`` for the other operations, which set none)."""
    if kind == "update":
        checked = parse_assignments(schema, set_columns)
        check_expressions(schema, checked)
        return {a.name: a.expression for a in checked}
    if set_columns:
        raise ConfigurationError(f"set applies to update only, not to {kind}")
    return None


def _sources(table: Table, kind: str, source_files: Sequence[str]) -> list[Source]:
    """An overwrite's checked Parquet files to load (none for the other operations, which load none)."""
    if kind == "overwrite":
        if not source_files:
            raise ConfigurationError("an overwrite needs at least one Parquet file to load (--from)")
        if len(set(source_files)) != len(source_files):
            raise ConfigurationError("a Parquet file to load is listed more than once")
        return [inspect_source(table, path) for path in source_files]
    if source_files:
        raise ConfigurationError(f"files to load apply to overwrite only, not to {kind}")
    return []


def _entries(table: Table, snapshot: Snapshot, predicate: Predicate, kind: str) -> list[dict[str, Any]]:
    """The task entries of the data files that may hold a matching row, each with its sort key ``_order``.

    An entry is ``all-rows-match`` (removed unread) for ``delete`` and ``overwrite`` when the file has no
    delete files and its partition or metrics prove that every row matches.
    """
    metadata = table.metadata
    schema = metadata.schema()
    specs = metadata.specs()
    all_rows_match = predicate.strict_evaluator(metadata)
    scanned_files = scan_data_files(table, snapshot, predicate.unbound)
    entries: list[dict[str, Any]] = []
    for scanned in scanned_files:
        data_file = scanned.data_file
        whole = kind != "update" and not scanned.delete_files and all_rows_match(data_file)
        entries.append(
            {
                **scanned_to_json(scanned, specs, schema),
                "all-rows-match": whole,
                "_order": (
                    data_file.spec_id,
                    specs[data_file.spec_id].partition_to_path(data_file.partition, schema),
                    data_file.file_path,
                ),
            }
        )
    return entries


def _tasks(
    common: _Common,
    entries: list[dict[str, Any]],
    sources: Sequence[Source],
    task_size_bytes: int,
) -> list[CowTask]:
    """Pack files into tasks of at most ``task_size_bytes`` to read, in (spec, partition, path) order.

    Files removed without reading cost nothing; files to load go in tasks of their own.
    """
    tasks: list[CowTask] = []
    current: list[dict[str, Any]] = []
    current_bytes = 0

    def close(data_files: list[dict[str, Any]], source_files: list[CowSourceFile]) -> None:
        tasks.append(
            {
                "schema": COW_TASK,
                **common,
                "task_id": len(tasks),
                "data_files": data_files,
                "source_files": source_files,
            }
        )

    for entry in sorted(entries, key=lambda e: e["_order"]):
        size = 0 if entry["all-rows-match"] else int(entry["data-file"]["file-size-in-bytes"])
        if current and size and current_bytes + size > task_size_bytes:
            close(current, [])
            current, current_bytes = [], 0
        current.append({k: v for k, v in entry.items() if k != "_order"})
        current_bytes += size
    if current:
        close(current, [])
    batch: list[CowSourceFile] = []
    batch_bytes = 0
    for source in sources:
        if batch and batch_bytes + source.size_bytes > task_size_bytes:
            close([], batch)
            batch, batch_bytes = [], 0
        batch.append(
            {"path": source.path, "size-in-bytes": source.size_bytes, "record-count": source.record_count}
        )
        batch_bytes += source.size_bytes
    if batch:
        close([], batch)
    return tasks

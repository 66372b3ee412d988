"""Planning a MERGE: the write mode and isolation level, the source, the target files that may hold a
source key, and the tasks. Reads metadata only (manifests, the source's footers).

Without a NOT MATCHED BY SOURCE clause, only target files whose partition and column bounds may hold a
source key are candidates: the source's key bounds (from its Parquet statistics, numeric and date keys)
are the filter, and the conflict-detection filter of the commit. With one, every target file is (Spark
then pushes nothing to the target scan either). The target files are split into tasks by size; a target
row lies in one file, so the tasks change disjoint rows. Which source rows no target row matches
(the inserts) is known only against every candidate file, so one task does the inserts: the only task,
or, when there are several, one more task that reads only the candidates' key columns.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.commit.snapshots import IsolationLevel
from airflow_provider_iceberg_exec.engine.contracts import MERGE_PLAN, MERGE_TASK
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.io.catalog import refresh_table, table_name
from airflow_provider_iceberg_exec.engine.meta.format_versions import check_writable_format
from airflow_provider_iceberg_exec.engine.meta.scan import check_branch, parse_where, scan_data_files
from airflow_provider_iceberg_exec.engine.meta.task_files import scanned_to_json
from airflow_provider_iceberg_exec.engine.ops.merge.clauses import MergeClauses
from airflow_provider_iceberg_exec.engine.ops.merge.evaluate import check_clauses
from airflow_provider_iceberg_exec.engine.ops.merge.source import MergeSource, resolve_source
from airflow_provider_iceberg_exec.engine.ops.merge.task import key_fields_for

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata

__all__ = ["DEFAULT_TASK_SIZE_BYTES", "MERGE_MODES", "plan_merge"]

log = logging.getLogger(__name__)

#: target bytes per task; tasks map to Airflow tasks
DEFAULT_TASK_SIZE_BYTES = 1 << 30
MERGE_MODES = ("copy-on-write", "merge-on-read")
_MODE_PROPERTY = "write.merge.mode"
_ISOLATION_PROPERTY = "write.merge.isolation-level"


def plan_merge(
    table: Table,
    *,
    on: Sequence[str],
    source_files: Sequence[str] = (),
    source_table: str | None = None,
    source_snapshot_id: int | None = None,
    when_matched: Sequence[str] = (),
    when_not_matched: Sequence[str] = (),
    when_not_matched_by_source: Sequence[str] = (),
    mode: str | None = None,
    isolation_level: str | None = None,
    branch: str = "main",
    task_size_bytes: int = DEFAULT_TASK_SIZE_BYTES,
) -> dict[str, Any]:
    """Plan a MERGE of a source into ``table`` on the ``on`` columns (see :mod:`..merge`).

    :param mode: ``copy-on-write`` or ``merge-on-read``; default the table's ``write.merge.mode``.
    :param isolation_level: default the table's ``write.merge.isolation-level``, else serializable.
    :returns: the plan (``iceberg-exec/merge-plan@1``); its ``tasks`` feed
        :func:`~.task.execute_merge_task`.
    :raises ConfigurationError: for a bad clause, key, source, mode or isolation level, a source whose
        columns do not fit, merge-on-read on a v1 table, or a format version above 3.
    """
    refresh_table(table)
    metadata = table.metadata
    name = table_name(table)
    check_merge_format(metadata, name)
    if task_size_bytes <= 0:
        raise ConfigurationError("task_size_bytes must be > 0")
    check_branch(metadata, branch, name)
    schema = metadata.schema()
    clauses = MergeClauses.parse(
        schema,
        when_matched=when_matched,
        when_not_matched=when_not_matched,
        when_not_matched_by_source=when_not_matched_by_source,
    )
    key_fields_for(table, list(on))
    source = resolve_source(
        table, paths=list(source_files), source_table=source_table, snapshot_id=source_snapshot_id
    )
    _check_source_columns(clauses, source, list(on))
    check_clauses(clauses, schema, source.arrow_schema)
    write_mode = _mode(mode, metadata.properties, metadata.format_version)
    level = _isolation(isolation_level, metadata.properties)
    snapshot = table.snapshot_by_name(branch)
    conflict_filter = "true" if clauses.not_matched_by_source else _key_bounds(table, source, list(on))
    candidates = (
        [] if snapshot is None else scan_data_files(table, snapshot, parse_where(conflict_filter, schema))
    )
    specs = metadata.specs()
    common: dict[str, Any] = {
        "table": name,
        "branch": branch,
        "base_snapshot_id": None if snapshot is None else snapshot.snapshot_id,
        "schema_id": schema.schema_id,
        "output_spec_id": metadata.default_spec_id,
        "plan_id": uuid.uuid4().hex,
        "mode": write_mode,
        "isolation_level": level.value,
        "on": list(on),
        "clauses": clauses.to_json(),
        "conflict_filter": conflict_filter,
        "source": source.to_json(),
    }
    entries = [scanned_to_json(s, specs, schema) for s in candidates]
    tasks = _tasks(common, entries, clauses, task_size_bytes)
    log.info(
        "planned merge into %s (%s) at snapshot %s: %d candidate file(s) of %s, %d source row(s), %d task(s)",
        name,
        write_mode,
        common["base_snapshot_id"],
        len(entries),
        conflict_filter,
        source.record_count,
        len(tasks),
    )
    return {
        "schema": MERGE_PLAN,
        **common,
        "tasks": tasks,
        "candidate_data_files_count": len(entries),
        "source_rows": source.record_count,
    }


def _check_source_columns(clauses: MergeClauses, source: MergeSource, on: list[str]) -> None:
    names = set(source.arrow_schema.names)
    if missing := [c for c in on if c not in names]:
        raise ConfigurationError(f"the merge source has no join column {', '.join(missing)}")
    for clause in clauses.all:
        if clauses.copies_source(clause) and (missing := [c for c in clauses.columns if c not in names]):
            raise ConfigurationError(
                f"clause {clause.text!r} takes every column from the source, which lacks {', '.join(missing)}"
            )


def check_merge_format(metadata: TableMetadata, name: str) -> None:
    """Refuse a format version MERGE cannot commit to: above 3 (v3 writes DVs and carries row lineage).

    :raises ConfigurationError: in one line; the table is not touched.
    """
    check_writable_format(metadata, name)


def _mode(explicit: str | None, properties: Mapping[str, str], format_version: int) -> str:
    value = explicit if explicit else properties.get(_MODE_PROPERTY, "copy-on-write")
    mode = str(value).strip().lower()
    if mode not in MERGE_MODES:
        where = "mode" if explicit else f"table property {_MODE_PROPERTY}"
        raise ConfigurationError(f"{where} {value!r}: use copy-on-write or merge-on-read")
    if mode == "merge-on-read" and format_version < 2:
        raise ConfigurationError("merge-on-read needs a format-version 2 table (v1 has no delete files)")
    return mode


def _isolation(explicit: str | None, properties: Mapping[str, str]) -> IsolationLevel:
    if explicit:
        return IsolationLevel.parse(explicit)
    value = properties.get(_ISOLATION_PROPERTY, IsolationLevel.SERIALIZABLE.value)
    try:
        return IsolationLevel.parse(value)
    except ConfigurationError as err:
        raise ConfigurationError(f"table property {_ISOLATION_PROPERTY}={value!r}: {err}") from err


def _key_bounds(table: Table, source: MergeSource, on: list[str]) -> str:
    """A row filter that every target row a source key can match satisfies: each numeric or date key
    between its smallest and largest source value (Parquet statistics), else ``true``."""
    import datetime

    from pyiceberg.types import DateType, IntegerType, LongType

    if source.table is not None or not source.files:
        return "true"
    schema = table.metadata.schema()
    terms = []
    for column in on:
        if not isinstance(schema.find_field(column).field_type, (IntegerType, LongType, DateType)):
            continue
        bounds = _column_bounds(table, source, column)
        if bounds is None:
            continue
        if bounds == ():
            return "false"  # every key is null or the source is empty: nothing can match
        low, high = bounds

        def literal(value: Any) -> str:
            return f"'{value.isoformat()}'" if isinstance(value, datetime.date) else str(int(value))

        terms.append(f"{column} >= {literal(low)} and {column} <= {literal(high)}")
    return " and ".join(terms) if terms else "true"


def _column_bounds(table: Table, source: MergeSource, column: str) -> tuple[Any, ...] | None:
    """``(min, max)`` of a source column's non-null values; ``()`` when it has none; ``None`` unknown."""
    import pyarrow.parquet as pq

    lows, highs = [], []
    for source_file in source.files:
        with table.io.new_input(source_file.path).open() as stream:
            meta = pq.ParquetFile(stream, pre_buffer=False).metadata
        index = meta.schema.to_arrow_schema().get_field_index(column)
        for group in range(meta.num_row_groups):
            rows = meta.row_group(group).num_rows
            stats = meta.row_group(group).column(index).statistics
            if rows == 0 or (stats is not None and stats.null_count == rows):
                continue  # no row, or only nulls: they match nothing
            if stats is None or not stats.has_min_max:
                return None
            lows.append(stats.min)
            highs.append(stats.max)
    return (min(lows), max(highs)) if lows else ()


def _tasks(
    common: Mapping[str, Any], entries: list[dict[str, Any]], clauses: MergeClauses, task_size_bytes: int
) -> list[dict[str, Any]]:
    """Pack the candidates into tasks by size; give the inserts to the only task or to one more."""
    groups: list[list[dict[str, Any]]] = []
    size = 0
    if not clauses.insert_only:
        for entry in entries:
            entry_size = int(entry["data-file"]["file-size-in-bytes"])
            if not groups or (size + entry_size > task_size_bytes and groups[-1]):
                groups.append([])
                size = 0
            groups[-1].append(entry)
            size += entry_size
    inserts = bool(clauses.not_matched)
    specs: list[tuple[list[dict[str, Any]], list[dict[str, Any]], bool]] = []
    if len(groups) == 1:
        specs.append((groups[0], [], inserts))
    else:
        specs.extend((group, [], False) for group in groups)
        if inserts:
            specs.append(([], entries, True))
    if not specs:
        specs.append(([], [], False))  # nothing to read: one empty task still commits nothing
    return [
        {
            "schema": MERGE_TASK,
            **common,
            "task_id": str(number),
            "tasks_count": len(specs),
            "inserts": insert,
            "data_files": data_files,
            "key_files": key_files,
        }
        for number, (data_files, key_files, insert) in enumerate(specs)
    ]

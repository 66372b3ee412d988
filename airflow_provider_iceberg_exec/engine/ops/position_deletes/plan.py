"""Planning a position-delete rewrite: Spark's size-based bin packing of the position delete files of each
partition, one task per group, each with the live data files its positions may name."""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.config import CompactionOptions, PositionDeleteOptions
from airflow_provider_iceberg_exec.engine.contracts import (
    POSITION_DELETE_PLAN,
    POSITION_DELETE_TASK,
    PositionDeletePlan,
    PositionDeleteTask,
)
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.io.catalog import refresh_table, table_name
from airflow_provider_iceberg_exec.engine.meta.datafile_json import data_file_to_json
from airflow_provider_iceberg_exec.engine.meta.format_versions import check_writable_format
from airflow_provider_iceberg_exec.engine.meta.scan import (
    ScannedDelete,
    ScannedFile,
    check_branch,
    parse_where,
    scan_snapshot,
)
from airflow_provider_iceberg_exec.engine.ops.planning import FileCandidate, FileGroup, plan_file_groups

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

log = logging.getLogger(__name__)


def check_format_version(metadata: TableMetadata, name: str) -> None:
    """Refuse a table without position delete files to rewrite (v1) or of a version this product does not
    know (above 3). On v3 the rewrite turns v2 position delete files into DVs.

    :raises ConfigurationError: in one line; the table is not touched.
    """
    if metadata.format_version == 1:
        raise ConfigurationError(
            f"cannot rewrite position deletes of {name}: format version 1 tables have no delete files"
        )
    check_writable_format(metadata, name)


def plan_position_delete_rewrite(
    table: Table,
    *,
    where: str | None = None,
    options: Mapping[str, Any] | None = None,
    branch: str = "main",
) -> PositionDeletePlan:
    """Plan a rewrite of ``table``'s position delete files, as Spark's ``rewrite_position_delete_files``.

    Live position delete files whose partition may hold rows matching ``where`` (inclusive projection of
    the filter onto each file's spec) are bucketed by ``(spec id, partition)`` and bin-packed with Java's
    ``BinPackRewritePositionDeletePlanner`` filters (file: outside the size range; group: enough files,
    enough content or too much content; ``rewrite-all`` skips both). On a v3 table every ``(spec,
    partition)`` with a v2 position file is one group of all of them (they become DVs; DVs alone are
    left as they are, one per data file already). Nothing is written.

    :param where: a PyIceberg row filter selecting partitions, e.g. ``"day >= '2026-01-01'"``.
    :param options: Spark's options by name (``target-file-size-bytes``, ``min-input-files``, ...).
    :param branch: the branch to rewrite.
    :returns: the plan document (``iceberg-exec/position-delete-plan@1``); no task means nothing to do.
    :raises ConfigurationError: for bad options or filter, a v1 table or a version above 3.
    """
    refresh_table(table)
    metadata, name = table.metadata, table_name(table)
    check_format_version(metadata, name)
    resolved = PositionDeleteOptions.from_options(options, metadata.properties)
    row_filter = parse_where(where, metadata.schema())
    check_branch(metadata, branch, name)
    snapshot = table.snapshot_by_name(branch)
    plan = PositionDeletePlan(
        schema=POSITION_DELETE_PLAN,
        table=name,
        branch=branch,
        base_snapshot_id=snapshot.snapshot_id if snapshot else None,
        where=where,
        options=resolved.to_options(),
        tasks=[],
        commit_batches=[],
    )
    if snapshot is None:
        log.info("table %s has no snapshot on branch %s: nothing to rewrite", name, branch)
        return plan
    files = scan_snapshot(table.io, metadata, snapshot)
    matches = _partition_filter(metadata, row_filter)
    candidates = [
        _candidate(d) for d in files.delete_files if _is_position_file(d.data_file) and matches(d.data_file)
    ]
    outcome = plan_file_groups(
        candidates,
        _v3_planner(resolved.planner) if metadata.format_version >= 3 else resolved.planner,
        current_spec_id=metadata.default_spec_id,
        output_spec_id=metadata.default_spec_id,
        apply_deletes=True,
        bucket_by_file_spec=True,
    )
    targets = _targets(files.data_files)
    batch_of = {gid: number for number, batch in enumerate(outcome.commit_batches) for gid in batch}
    plan["tasks"] = [
        _task(plan, group, batch_of[group.group_id], snapshot, metadata, targets) for group in outcome.groups
    ]
    plan["commit_batches"] = [list(b) for b in outcome.commit_batches]
    log.info(
        "planned %d group(s) over %d of %d position delete file(s) of %s at snapshot %s",
        len(plan["tasks"]),
        sum(len(g.files) for g in outcome.groups),
        len(candidates),
        name,
        snapshot.snapshot_id,
    )
    return plan


def _v3_planner(options: CompactionOptions) -> CompactionOptions:
    """v3: one group per ``(spec, partition)`` with every v2 position file of it, whatever their sizes, so
    that each data file gets one DV folding all of them (Spark's v3 rewrite may write two, trap 7)."""
    return dataclasses.replace(
        options,
        rewrite_all=True,
        max_file_group_size_bytes=2**62,
        max_file_group_input_files=2**63 - 1,
        max_files_to_rewrite=None,
    )


def _is_position_file(data_file: DataFile) -> bool:
    """A Parquet position delete file (v2); deletion vectors and equality deletes are not rewritten."""
    from pyiceberg.manifest import DataFileContent, FileFormat

    return (
        data_file.content == DataFileContent.POSITION_DELETES and data_file.file_format == FileFormat.PARQUET
    )


def _partition_filter(metadata: TableMetadata, row_filter: BooleanExpression) -> Callable[[DataFile], bool]:
    """Whether a file's partition may hold rows matching ``row_filter`` (inclusive projection per spec)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.expressions.visitors import expression_evaluator, inclusive_projection
    from pyiceberg.schema import Schema

    if isinstance(row_filter, AlwaysTrue):
        return lambda _data_file: True
    schema = metadata.schema()
    evaluators: dict[int, Callable[[Any], bool]] = {}
    for spec_id, spec in metadata.specs().items():
        projected = inclusive_projection(schema, spec, case_sensitive=True)(row_filter)
        partition_schema = Schema(*spec.partition_type(schema).fields)
        evaluators[spec_id] = expression_evaluator(partition_schema, projected, case_sensitive=True)
    return lambda data_file: bool(evaluators[data_file.spec_id](data_file.partition))


def _candidate(scanned: ScannedDelete) -> FileCandidate:
    data_file = scanned.data_file
    return FileCandidate(
        path=data_file.file_path,
        size_bytes=data_file.file_size_in_bytes,
        record_count=data_file.record_count,
        spec_id=data_file.spec_id,
        partition=tuple(data_file.partition[i] for i in range(len(data_file.partition))),
        handle=scanned,
    )


def _targets(data_files: Sequence[ScannedFile]) -> dict[str, list[ScannedFile]]:
    """Delete file path -> the live data files it applies to (spec, partition, sequence number, bounds)."""
    targets: dict[str, list[ScannedFile]] = defaultdict(list)
    for scanned in data_files:
        for delete in scanned.delete_files:
            targets[delete.data_file.file_path].append(scanned)
    return targets


def _task(
    plan: PositionDeletePlan,
    group: FileGroup,
    commit_batch: int,
    snapshot: Snapshot,
    metadata: TableMetadata,
    targets: Mapping[str, Sequence[ScannedFile]],
) -> PositionDeleteTask:
    specs, schema = metadata.specs(), metadata.schema()
    deletes = [c.handle for c in group.files if isinstance(c.handle, ScannedDelete)]
    encoded = [data_file_to_json(d.data_file, specs[d.data_file.spec_id], schema) for d in deletes]
    live = {
        scanned.data_file.file_path: scanned.data_sequence_number
        for d in deletes
        for scanned in targets.get(d.data_file.file_path, ())
    }
    return PositionDeleteTask(
        schema=POSITION_DELETE_TASK,
        table=plan["table"],
        branch=plan["branch"],
        group_id=group.group_id,
        commit_batch=commit_batch,
        base_snapshot_id=snapshot.snapshot_id,
        options=plan["options"],
        spec_id=group.spec_id,
        partition=list(encoded[0]["partition"]),
        input_bytes=group.input_bytes,
        delete_files=[
            {"content-file": doc, "data-sequence-number": d.data_sequence_number}
            for doc, d in zip(encoded, deletes, strict=True)
        ],
        live_data_files=[
            {"file-path": path, "data-sequence-number": sequence} for path, sequence in sorted(live.items())
        ],
    )

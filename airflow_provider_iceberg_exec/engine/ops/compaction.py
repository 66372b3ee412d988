"""Data-file compaction: plan groups, rewrite each group in one bounded execution, commit ``replace``.

Three steps that exchange small JSON documents, so that they can run in one process (:func:`compact`),
from the CLI, or as separate Airflow tasks:

``plan_compaction`` -> a plan with one task per file group -> ``execute_rewrite_task`` per task -> a
result per task -> ``commit_compaction`` -> one ``replace`` snapshot per commit batch.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.commit.cleanup import delete_unreferenced, uris_of
from airflow_provider_iceberg_exec.engine.commit.snapshots import (
    COMMIT_ID_PROPERTY,
    DanglingDeletes,
    commit_rewrite,
    find_commit,
    landed_snapshots,
)
from airflow_provider_iceberg_exec.engine.commit.verification import BaseFiles, check_rows, verify_added_files
from airflow_provider_iceberg_exec.engine.config import CompactionOptions, ResourceLimits, Strategy
from airflow_provider_iceberg_exec.engine.contracts import (
    COMPACTION_PLAN,
    COMPACTION_RESULT,
    REWRITE_RESULT,
    REWRITE_TASK,
    CommitRecord,
    CompactionPlan,
    CompactionResult,
    PlanSummary,
    RewriteResult,
    RewriteTask,
    SkippedFile,
)
from airflow_provider_iceberg_exec.engine.deletes.apply import DeleteStats, iter_live_group_batches
from airflow_provider_iceberg_exec.engine.documents import (
    applied_deletes_of,
    check_base_snapshot,
    check_rewrite_result,
    check_rewrite_task,
)
from airflow_provider_iceberg_exec.engine.errors import (
    CommitStateUnknownError,
    CommitValidationError,
    ConfigurationError,
    DataFileCodecError,
    IcebergExecError,
)
from airflow_provider_iceberg_exec.engine.io.catalog import refresh_table
from airflow_provider_iceberg_exec.engine.io.read import READ_AHEAD_BATCHES, READ_AHEAD_BYTES, read_ahead
from airflow_provider_iceberg_exec.engine.io.session import resource_error, track_resources
from airflow_provider_iceberg_exec.engine.io.sorting import (
    SortKey,
    match_table_sort_order,
    parse_sort_order,
    sort_for_output,
    table_sort_keys,
)
from airflow_provider_iceberg_exec.engine.io.write import PartitionSplitter, RollingDataFileWriter
from airflow_provider_iceberg_exec.engine.meta.datafile_json import data_file_from_json, data_file_to_json
from airflow_provider_iceberg_exec.engine.meta.scan import (
    ScannedFile,
    check_branch,
    is_file_scoped,
    parse_where,
    scan_data_files,
)
from airflow_provider_iceberg_exec.engine.meta.task_files import (
    has_equality_deletes,
    scanned_from_json,
    scanned_to_json,
)
from airflow_provider_iceberg_exec.engine.ops.planning import FileCandidate, FileGroup, plan_file_groups

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

__all__ = ["commit_compaction", "compact", "execute_rewrite_task", "plan_compaction"]

log = logging.getLogger(__name__)


def plan_compaction(
    table: Table,
    *,
    where: str | None = None,
    options: Mapping[str, Any] | None = None,
    strategy: str = "binpack",
    sort_order: str | None = None,
    branch: str = "main",
    only_files_with_equality_deletes: bool = False,
) -> CompactionPlan:
    """Plan a compaction of ``table`` with Spark's ``rewrite_data_files`` semantics.

    Files that may hold rows matching ``where`` are candidates; Spark's file and group filters choose
    what to rewrite. Nothing is written.

    :param where: a PyIceberg row filter, e.g. ``"day >= '2026-01-01' and region = 'eu'"``.
    :param options: Spark's options by name (``target-file-size-bytes``, ``min-input-files``, ...).
    :param strategy: ``binpack`` or ``sort``.
    :param sort_order: for ``sort``: ``"col ASC NULLS LAST, ..."``; default: the table's sort order.
    :param branch: the branch to compact.
    :param only_files_with_equality_deletes: consider only data files that equality deletes apply to
        (equality-delete resolution, :func:`resolve.resolve_equality_deletes`).
    :returns: the plan document (``iceberg-exec/compaction-plan@1``): its ``tasks`` are the inputs of
        :func:`execute_rewrite_task`.
    :raises ConfigurationError: for bad options, strategy, sort order or filter.
    """
    refresh_table(table)
    metadata = table.metadata
    resolved = CompactionOptions.from_options(options, metadata.properties)
    chosen = _strategy(strategy)
    keys = _sort_keys(table, chosen, sort_order)
    output_spec_id = _output_spec_id(metadata, resolved)
    row_filter = parse_where(where, metadata.schema())
    check_branch(metadata, branch, _table_name(table))
    snapshot = table.snapshot_by_name(branch)
    plan = CompactionPlan(
        schema=COMPACTION_PLAN,
        table=_table_name(table),
        branch=branch,
        base_snapshot_id=snapshot.snapshot_id if snapshot else None,
        strategy=chosen.value,
        sort_order=", ".join(k.to_text() for k in keys) if keys else None,
        where=where,
        options=resolved.to_options(),
        tasks=[],
        skipped=[],
        commit_batches=[],
    )
    if snapshot is None:
        log.info("table %s has no snapshot on branch %s: nothing to compact", plan["table"], branch)
        return plan
    candidates = [
        _candidate(f)
        for f in scan_data_files(table, snapshot, row_filter)
        if not only_files_with_equality_deletes or has_equality_deletes(f)
    ]
    outcome = plan_file_groups(
        candidates,
        resolved,
        current_spec_id=metadata.default_spec_id,
        output_spec_id=output_spec_id,
        apply_deletes=True,
    )
    for path, reason in outcome.skipped:
        log.warning("left out %s: %s", path, reason)
    batch_of = {gid: number for number, batch in enumerate(outcome.commit_batches) for gid in batch}
    plan["tasks"] = [
        _rewrite_task(plan, group, batch_of[group.group_id], snapshot, output_spec_id, metadata)
        for group in outcome.groups
    ]
    plan["skipped"] = [SkippedFile(path=p, reason=r) for p, r in outcome.skipped]
    plan["commit_batches"] = [list(b) for b in outcome.commit_batches]
    log.info(
        "planned %d group(s) over %d of %d candidate file(s) of %s at snapshot %s",
        len(plan["tasks"]),
        sum(len(g.files) for g in outcome.groups),
        len(candidates),
        plan["table"],
        snapshot.snapshot_id,
    )
    return plan


def _output_spec_id(metadata: TableMetadata, resolved: CompactionOptions) -> int:
    """The partition spec the output is written in: ``output-spec-id``, by default the table's."""
    spec_id = resolved.output_spec_id if resolved.output_spec_id is not None else metadata.default_spec_id
    if spec_id not in metadata.specs():
        valid = sorted(metadata.specs())
        raise ConfigurationError(f"output-spec-id {spec_id} is not a partition spec; valid: {valid}")
    return spec_id


def _candidate(scanned: ScannedFile) -> FileCandidate:
    """What the file and group filters need to know about one live data file."""
    data_file = scanned.data_file
    return FileCandidate(
        path=data_file.file_path,
        size_bytes=data_file.file_size_in_bytes,
        record_count=data_file.record_count,
        spec_id=data_file.spec_id,
        partition=tuple(data_file.partition[i] for i in range(len(data_file.partition))),
        delete_file_count=len(scanned.delete_files),
        file_scoped_deleted_records=sum(
            d.data_file.record_count for d in scanned.delete_files if is_file_scoped(d.data_file)
        ),
        handle=scanned,
    )


def _rewrite_task(
    plan: CompactionPlan,
    group: FileGroup,
    commit_batch: int,
    snapshot: Snapshot,
    output_spec_id: int,
    metadata: TableMetadata,
) -> RewriteTask:
    """The task of one planned group. Which delete files the commit drops is decided at commit time,
    on the head it commits on, so the task carries only its inputs and the deletes that apply to them."""
    specs, schema = metadata.specs(), metadata.schema()
    return RewriteTask(
        schema=REWRITE_TASK,
        table=plan["table"],
        branch=plan["branch"],
        group_id=group.group_id,
        commit_batch=commit_batch,
        base_snapshot_id=snapshot.snapshot_id,
        base_sequence_number=snapshot.sequence_number,
        strategy=plan["strategy"],
        sort_order=plan["sort_order"],
        options=plan["options"],
        output_spec_id=output_spec_id,
        needs_repartition=group.needs_repartition,
        input_bytes=group.input_bytes,
        data_files=[
            scanned_to_json(c.handle, specs, schema) for c in group.files if isinstance(c.handle, ScannedFile)
        ],
    )


def execute_rewrite_task(table: Table, task: Mapping[str, Any], limits: ResourceLimits) -> RewriteResult:
    """Rewrite one file group in a bounded execution and return its result document.

    Rows are streamed: read file by file, sorted by DataFusion (spilling) when the strategy is ``sort`` or
    the rows must move to another partition spec, and written as new data files. On any failure every
    file this task wrote is removed.

    :returns: ``iceberg-exec/rewrite-result@1`` with the new files as DataFile JSON.
    :raises ConfigurationError: for a malformed task or one that does not fit the table.
    :raises DataFileReadError: when an input file is missing or corrupt.
    :raises ResourceLimitError: when the memory pool or the spill disk runs out.
    """
    check_rewrite_task(task)
    metadata = table.metadata
    check_base_snapshot(metadata, task["base_snapshot_id"])
    schema, specs = metadata.schema(), metadata.specs()
    layout = _OutputLayout.of(task, metadata)
    entries = task["data_files"]
    inputs = [scanned_from_json(e, specs, schema) for e in entries]
    group_id = str(task["group_id"])
    expected_rows = sum(f.data_file.record_count for f in inputs)
    deletes = DeleteStats()
    with track_resources(limits) as (spill_dir, stats):
        writer = _writer(table, layout, limits, group_id)
        # Every delete file that applies is applied: the rewrite keeps exactly the live rows. They are
        # read on a second thread while this one writes (decoding and encoding both release the GIL).
        live = read_ahead(
            iter_live_group_batches(
                table.io, metadata, inputs, limits=limits, spill_dir=spill_dir, stats=deletes
            ),
            depth=READ_AHEAD_BATCHES,
            max_bytes=READ_AHEAD_BYTES,
        )
        try:
            added = _write_rows(live, writer, layout, schema, limits, spill_dir)
            _check_rows_conserved(group_id, expected_rows, deletes, writer.rows_written)
        except BaseException as err:
            live.close()
            writer.abort()
            mapped = resource_error(err)
            if mapped is err:
                raise
            raise mapped from err
        finally:
            live.close()
    rewritten_bytes = sum(f.data_file.file_size_in_bytes for f in inputs)
    added_bytes = sum(f.file_size_in_bytes for f in added)
    log.info(
        "group %s: %d file(s), %d bytes -> %d file(s), %d bytes, %d rows; peak RSS %d MiB, spilled %d MiB",
        group_id,
        len(inputs),
        rewritten_bytes,
        len(added),
        added_bytes,
        writer.rows_written,
        stats.peak_rss_bytes >> 20,
        stats.spilled_bytes >> 20,
    )
    return RewriteResult(
        schema=REWRITE_RESULT,
        table=task["table"],
        branch=task.get("branch", "main"),
        group_id=group_id,
        commit_batch=task.get("commit_batch", 0),
        base_snapshot_id=task["base_snapshot_id"],
        options=task.get("options", {}),
        rewritten_data_files=[e["data-file"] for e in entries],
        added_data_files=[data_file_to_json(f, layout.spec, schema) for f in added],
        applied_deletes={str(e["data-file"]["file-path"]): applied_deletes_of(e) for e in entries},
        rewritten_bytes_count=rewritten_bytes,
        added_bytes_count=added_bytes,
        rewritten_records=expected_rows,
        added_records=writer.rows_written,
        deleted_records=deletes.rows_deleted,
        position_deleted_records=deletes.position_deleted,
        equality_deleted_records=deletes.equality_deleted,
        peak_rss_bytes=stats.peak_rss_bytes,
        spilled_bytes=stats.spilled_bytes,
        elapsed_seconds=round(stats.elapsed_seconds, 3),
    )


@dataclass(frozen=True)
class _OutputLayout:
    """How a task's output is laid out: its spec, target size, and the order its rows are written in."""

    spec: PartitionSpec
    target_file_size_bytes: int
    keys: tuple[SortKey, ...]
    #: sort the rows before writing: a ``sort`` strategy, or rows moving to another partitioned spec
    needs_order: bool
    #: the sort order id the files are stamped with; ``None`` for binpack
    sort_order_id: int | None

    @classmethod
    def of(cls, task: Mapping[str, Any], metadata: TableMetadata) -> _OutputLayout:
        specs, schema = metadata.specs(), metadata.schema()
        output_spec_id = int(task["output_spec_id"])
        if output_spec_id not in specs:
            raise ConfigurationError(
                f"task output spec {output_spec_id} is not a partition spec of the table"
            )
        spec = specs[output_spec_id]
        strategy = _strategy(str(task.get("strategy", "binpack")))
        keys = parse_sort_order(task["sort_order"], schema) if task.get("sort_order") else ()
        # Rows moving to another spec are clustered by their new partition; an unpartitioned output has one.
        needs_order = strategy is Strategy.SORT or (
            bool(task.get("needs_repartition")) and not spec.is_unpartitioned()
        )
        sort_order_id = None
        if strategy is Strategy.SORT:
            # TableMetadata has no sort_orders_by_id(): build the id -> order map from its list.
            orders = {order.order_id: order for order in metadata.sort_orders}
            sort_order_id = match_table_sort_order(keys, orders, schema)
            if sort_order_id is None:
                log.warning(
                    "sort order %r is not one of the table's orders: files are stamped unsorted",
                    task["sort_order"],
                )
                sort_order_id = 0
        target = CompactionOptions.from_options(task.get("options")).target_file_size_bytes
        return cls(spec, target, keys, needs_order, sort_order_id)


def _writer(
    table: Table, layout: _OutputLayout, limits: ResourceLimits, group_id: str
) -> RollingDataFileWriter:
    from pyiceberg.table.locations import load_location_provider

    metadata = table.metadata
    return RollingDataFileWriter(
        io=table.io,
        location_provider=load_location_provider(metadata.location, metadata.properties),
        schema=metadata.schema(),
        spec=layout.spec,
        properties=metadata.properties,
        target_file_size_bytes=layout.target_file_size_bytes,
        buffer_bytes=limits.writer_buffer_bytes,
        sort_order_id=layout.sort_order_id,
        file_prefix=group_id,
    )


def _write_rows(
    live: Iterator[pa.RecordBatch],
    writer: RollingDataFileWriter,
    layout: _OutputLayout,
    schema: Schema,
    limits: ResourceLimits,
    spill_dir: str,
) -> list[DataFile]:
    """Sort the live rows when the layout needs it, split them by output partition, write, close."""
    batches = live
    if layout.needs_order:
        batches = sort_for_output(batches, layout.keys, layout.spec, schema, limits, spill_dir)
    splitter = PartitionSplitter(layout.spec, schema)
    for batch in batches:
        for partition_key, run in splitter.split(batch):
            writer.write(partition_key, run)
    return writer.close()


def _check_rows_conserved(group_id: str, expected_rows: int, deletes: DeleteStats, written: int) -> None:
    """Every input row was read, and every row the deletes did not remove was written."""
    live_rows = deletes.rows_read - deletes.rows_deleted
    if deletes.rows_read != expected_rows or written != live_rows:
        raise IcebergExecError(
            f"group {group_id} read {deletes.rows_read} of {expected_rows} rows, deleted "
            f"{deletes.rows_deleted}, but wrote {written}; nothing committed"
        )


def commit_compaction(
    table: Table, results: Sequence[Mapping[str, Any]], *, commit_id: str, failed_data_files_count: int = 0
) -> CompactionResult:
    """Commit rewrite results as ``replace`` snapshots, one per commit batch, idempotently.

    Each batch commits with id ``<commit_id>`` (or ``<commit_id>.<batch>`` when there are several), so a
    retry of the whole call skips the batches that already landed. Under ``partial-progress.enabled`` a
    batch that fails validation is counted and skipped, up to ``partial-progress.max-failed-commits``;
    otherwise the first failure raises.

    :param failed_data_files_count: files of groups whose rewrite already failed (partial progress).
    :raises CommitValidationError: when validation from the base snapshot fails (re-plan).
    :raises CommitConflictError: when the catalog kept rejecting the commit (retry later).
    :raises CommitStateUnknownError: when the catalog's answer is unknown.
    """
    docs = [check_rewrite_result(r) for r in results]
    summary = CompactionResult(
        schema=COMPACTION_RESULT,
        table=_table_name(table),
        rewritten_data_files_count=0,
        added_data_files_count=0,
        rewritten_bytes_count=0,
        failed_data_files_count=failed_data_files_count,
        removed_delete_files_count=0,
        snapshot_ids=[],
        already_committed=False,
        commits=[],
        # What the executions measured; optional in a result (a null counts as nothing measured).
        peak_rss_bytes=max((int(d.get("peak_rss_bytes") or 0) for d in docs), default=0),
        spilled_bytes=sum(int(d.get("spilled_bytes") or 0) for d in docs),
    )
    if not docs:
        log.info("nothing to commit for %s", summary["table"])
        return summary
    base_snapshot_id, branch = _common_base(docs, summary["table"])
    _check_groups_once(docs)
    options = CompactionOptions.from_options(docs[0].get("options"))
    batches: dict[int, list[Mapping[str, Any]]] = {}
    for doc in docs:
        batches.setdefault(int(doc["commit_batch"]), []).append(doc)
    refresh_table(table)
    check_branch(table.metadata, branch, _table_name(table))
    # What the results claim is proven before any batch is committed: a bad claim refuses the whole call
    # and deletes nothing (the document cannot say what is safe to delete). Batches that already landed
    # (a retry) are not proven again: their base may have expired since.
    pending = [
        doc
        for number, batch in batches.items()
        if find_commit(table.metadata, branch, _batch_id(commit_id, number, len(batches))) is None
        for doc in batch
    ]
    if pending:
        _verify_batch(table, BaseFiles(table, base_snapshot_id), pending)
    failed_commits = 0
    for number, batch in sorted(batches.items()):
        batch_id = _batch_id(commit_id, number, len(batches))
        try:
            _commit_batch(table, batch, batch_id, number, base_snapshot_id, branch, options, summary)
        except CommitValidationError as err:
            if not options.partial_progress_enabled:
                raise
            failed_commits += 1
            summary["failed_data_files_count"] += sum(len(d["rewritten_data_files"]) for d in batch)
            log.warning("commit batch %d failed validation: %s", number, err)
            if failed_commits > options.max_failed_commits:
                raise CommitValidationError(
                    f"{failed_commits} commit batches failed, more than partial-progress.max-failed-commits="
                    f"{options.max_failed_commits}; last: {err}"
                ) from err
    commits = summary["commits"]
    summary["already_committed"] = bool(commits) and all(c["already_committed"] for c in commits)
    return summary


def _common_base(docs: Sequence[Mapping[str, Any]], table_name: str) -> tuple[int, str]:
    """The one base snapshot and branch all results were planned on."""
    bases = {(d["table"], d["base_snapshot_id"], d["branch"]) for d in docs}
    if len(bases) != 1:
        raise ConfigurationError(
            f"results come from different plans {sorted(map(str, bases))}; commit each plan alone"
        )
    (name, base_snapshot_id, branch) = bases.pop()
    if name != table_name:
        raise ConfigurationError(f"the results are for table {name}, not {table_name}")
    return int(base_snapshot_id), str(branch)


def _commit_batch(
    table: Table,
    batch: Sequence[Mapping[str, Any]],
    batch_id: str,
    number: int,
    base_snapshot_id: int,
    branch: str,
    options: CompactionOptions,
    summary: CompactionResult,
) -> None:
    """Commit one batch as a ``replace`` snapshot and add it to ``summary``.

    On a validation failure its new files are removed, those the table does not reference (a rerun's files
    may be live through another commit), and the error is raised: nothing was committed, and the same
    validation fails on any retry, so the files could never be committed.
    """
    specs, schema = table.metadata.specs(), table.metadata.schema()
    rewritten = [data_file_from_json(f, specs, schema) for d in batch for f in d["rewritten_data_files"]]
    added = [data_file_from_json(f, specs, schema) for d in batch for f in d["added_data_files"]]
    # The deletes to drop are decided by the commit, on the branch head it commits on (on every retry):
    # those the rewrite left dangling, unless a concurrent commit made them apply again, and, with
    # remove-dangling-deletes, every other one.
    dangling = DanglingDeletes.ALL if options.remove_dangling_deletes else DanglingDeletes.REWRITTEN
    try:
        outcome = commit_rewrite(
            table,
            base_snapshot_id=base_snapshot_id,
            rewritten_data_files=rewritten,
            added_data_files=added,
            commit_id=batch_id,
            use_starting_sequence_number=options.use_starting_sequence_number,
            branch=branch,
            dangling_deletes=dangling,
        )
    except (ConfigurationError, CommitValidationError):
        # E.g. a format-version 3 table, or files gone meanwhile.
        delete_unreferenced(table, [f.file_path for f in added], what=f"uncommitted output of {batch_id}")
        raise
    summary["rewritten_data_files_count"] += len(rewritten)
    summary["added_data_files_count"] += len(added)
    summary["removed_delete_files_count"] += int(outcome.summary.get("removed-delete-files", "0"))
    summary["rewritten_bytes_count"] += sum(f.file_size_in_bytes for f in rewritten)
    summary["snapshot_ids"].append(outcome.snapshot_id)
    summary["commits"].append(
        CommitRecord(
            commit_batch=number,
            commit_id=batch_id,
            snapshot_id=outcome.snapshot_id,
            already_committed=outcome.already_committed,
            group_ids=[str(d["group_id"]) for d in batch],
        )
    )
    log.info(
        "commit batch %d: snapshot %s%s (%d files -> %d files)",
        number,
        outcome.snapshot_id,
        " (already committed)" if outcome.already_committed else "",
        len(rewritten),
        len(added),
    )


def compact(
    table: Table,
    *,
    where: str | None = None,
    options: Mapping[str, Any] | None = None,
    strategy: str = "binpack",
    sort_order: str | None = None,
    branch: str = "main",
    limits: ResourceLimits | None = None,
    commit_id: str | None = None,
    only_files_with_equality_deletes: bool = False,
) -> CompactionResult:
    """Plan, rewrite every group and commit: Spark's ``rewrite_data_files`` in one call.

    Groups run one after another, each bounded by ``limits``. Without partial progress a failing group
    removes what every group wrote and raises; with it, the failure is counted and the rest commit.

    >>> # compact(table, options={"target-file-size-bytes": "134217728"}, limits=ResourceLimits())
    """
    limits = limits or ResourceLimits()
    if commit_id is not None and (landed := _landed_result(table, branch, commit_id)) is not None:
        # A retry after the commit landed: re-planning would find the work done (or, after a partial
        # landing, plan new batches whose ids the landed ones already carry). Report what landed.
        return landed
    plan = plan_compaction(
        table,
        where=where,
        options=options,
        strategy=strategy,
        sort_order=sort_order,
        branch=branch,
        only_files_with_equality_deletes=only_files_with_equality_deletes,
    )
    resolved = CompactionOptions.from_options(plan["options"])
    results: list[RewriteResult] = []
    failed_files = 0
    try:
        for number, task in enumerate(plan["tasks"], start=1):
            log.info(
                "rewriting group %d of %d (%s, %d files)",
                number,
                len(plan["tasks"]),
                task["group_id"],
                len(task["data_files"]),
            )
            try:
                results.append(execute_rewrite_task(table, task, limits))
            except IcebergExecError:
                if not resolved.partial_progress_enabled:
                    raise
                failed_files += len(task["data_files"])
                log.exception("group %s failed; continuing under partial progress", task["group_id"])
        outcome = commit_compaction(
            table, results, commit_id=commit_id or uuid.uuid4().hex, failed_data_files_count=failed_files
        )
    except CommitStateUnknownError:
        raise  # the files may be live now: never delete them
    except BaseException:
        # Nothing this call wrote can be committed any more; what the table does not reference goes.
        written = [uri for done in results for uri in uris_of(done["added_data_files"])]
        delete_unreferenced(table, written, what="output of a failed compaction")
        raise
    outcome["plan"] = PlanSummary(
        base_snapshot_id=plan["base_snapshot_id"], groups=len(plan["tasks"]), skipped=len(plan["skipped"])
    )
    return outcome


def _landed_result(table: Table, branch: str, commit_id: str) -> CompactionResult | None:
    """The compaction result of the snapshots on ``branch`` that carry ``commit_id`` (or its batch ids).

    Counts come from the snapshot summaries; ``rewritten_bytes_count`` is their ``removed-files-size``,
    which also counts the bytes of the delete files removed.
    """
    refresh_table(table)
    landed = landed_snapshots(table.metadata, commit_id, branch)
    if not landed:
        return None

    def total(key: str) -> int:
        return sum(int(s.summary.additional_properties.get(key, "0")) for s in landed if s.summary)

    log.info("commit id %s already landed on %s: %d snapshot(s)", commit_id, branch, len(landed))
    return CompactionResult(
        schema=COMPACTION_RESULT,
        table=_table_name(table),
        rewritten_data_files_count=total("deleted-data-files"),
        added_data_files_count=total("added-data-files"),
        rewritten_bytes_count=total("removed-files-size"),
        failed_data_files_count=0,
        removed_delete_files_count=total("removed-delete-files"),
        snapshot_ids=[s.snapshot_id for s in landed],
        already_committed=True,
        commits=[
            CommitRecord(
                commit_id=s.summary.additional_properties.get(COMMIT_ID_PROPERTY) if s.summary else None,
                snapshot_id=s.snapshot_id,
                already_committed=True,
            )
            for s in landed
        ],
        peak_rss_bytes=0,
        spilled_bytes=0,
    )


def _strategy(text: str) -> Strategy:
    try:
        return Strategy(text.lower())
    except ValueError:
        raise ConfigurationError(
            f"unsupported strategy {text!r}; only binpack or sort is supported"
        ) from None


def _sort_keys(table: Table, strategy: Strategy, sort_order: str | None) -> tuple[SortKey, ...]:
    schema = table.metadata.schema()
    if strategy is Strategy.BINPACK:
        if sort_order:
            raise ConfigurationError("a sort order needs strategy 'sort'; drop it or pass --strategy sort")
        return ()
    if sort_order:
        return parse_sort_order(sort_order, schema)
    order = table.sort_order()
    if order.is_unsorted:
        raise ConfigurationError("strategy 'sort' needs a sort order and the table has none; pass one")
    return table_sort_keys(order, schema)


def _table_name(table: Table) -> str:
    return ".".join(table.name())


def _verify_batch(table: Table, base_files: BaseFiles, batch: Sequence[Mapping[str, Any]]) -> None:
    """Prove each result of a commit batch against the base snapshot and the storage, rows included."""
    specs, schema = table.metadata.specs(), table.metadata.schema()
    for doc in batch:
        rewritten = [data_file_from_json(f, specs, schema) for f in doc["rewritten_data_files"]]
        added = [data_file_from_json(f, specs, schema) for f in doc["added_data_files"]]
        verify_added_files(table, added)
        removed = base_files.check_removed(rewritten, doc["applied_deletes"])
        check_rows(
            removed,
            kept=sum(f.record_count for f in added),
            by_deletes=int(doc["deleted_records"]),
            by_position_deletes=int(doc["position_deleted_records"]),
            what=f"group {doc['group_id']}",
        )


def _batch_id(commit_id: str, number: int, batches: int) -> str:
    """The commit id of one commit batch: the caller's id, or ``<id>.<batch>`` when there are several."""
    return commit_id if batches == 1 else f"{commit_id}.{number}"


def _check_groups_once(docs: Sequence[Mapping[str, Any]]) -> None:
    """Refuse results that repeat a group or rewrite a file twice: a file is replaced once."""
    groups = [d["group_id"] for d in docs]
    if len(set(groups)) != len(groups):
        raise DataFileCodecError("the results list a group more than once; commit each group's result once")
    paths = [f["file-path"] for d in docs for f in d["rewritten_data_files"]]
    if len(set(paths)) != len(paths):
        raise DataFileCodecError("the results rewrite a data file twice; commit each plan once")
    added = [f["file-path"] for d in docs for f in d["added_data_files"]]
    if len(set(added)) != len(added) or set(added) & set(paths):
        raise DataFileCodecError("the results add a file twice, or add a file they also rewrite")

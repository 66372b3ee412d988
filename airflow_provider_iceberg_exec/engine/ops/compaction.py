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
    envelope,
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
    delete_targets,
    has_equality_deletes,
    removable_deletes,
    scanned_from_json,
    scanned_to_json,
)
from airflow_provider_iceberg_exec.engine.ops.planning import FileCandidate, plan_file_groups

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

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
) -> dict[str, Any]:
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
    schema = metadata.schema()
    resolved = CompactionOptions.from_options(options, metadata.properties)
    chosen = _strategy(strategy)
    keys = _sort_keys(table, chosen, sort_order)
    output_spec_id = (
        resolved.output_spec_id if resolved.output_spec_id is not None else metadata.default_spec_id
    )
    if output_spec_id not in metadata.specs():
        raise ConfigurationError(
            f"output-spec-id {output_spec_id} is not a partition spec of the table; "
            f"valid: {sorted(metadata.specs())}"
        )
    row_filter = parse_where(where, schema)
    check_branch(metadata, branch, _table_name(table))
    snapshot = table.snapshot_by_name(branch)
    doc = {
        "table": _table_name(table),
        "branch": branch,
        "base_snapshot_id": snapshot.snapshot_id if snapshot else None,
        "strategy": chosen.value,
        "sort_order": ", ".join(k.to_text() for k in keys) if keys else None,
        "where": where,
        "options": resolved.to_options(),
    }
    if snapshot is None:
        log.info("table %s has no snapshot on branch %s: nothing to compact", doc["table"], branch)
        return envelope(COMPACTION_PLAN, {**doc, "tasks": [], "skipped": [], "commit_batches": []})

    scanned = scan_data_files(table, snapshot, row_filter)
    candidates = [
        FileCandidate(
            path=f.data_file.file_path,
            size_bytes=f.data_file.file_size_in_bytes,
            record_count=f.data_file.record_count,
            spec_id=f.data_file.spec_id,
            partition=tuple(f.data_file.partition[i] for i in range(len(f.data_file.partition))),
            delete_file_count=len(f.delete_files),
            file_scoped_deleted_records=sum(
                d.data_file.record_count for d in f.delete_files if is_file_scoped(d.data_file)
            ),
            handle=f,
        )
        for f in scanned
        if not only_files_with_equality_deletes or has_equality_deletes(f)
    ]
    outcome = plan_file_groups(
        candidates,
        resolved,
        current_spec_id=metadata.default_spec_id,
        output_spec_id=output_spec_id,
        apply_deletes=True,
    )
    # Which live data files each delete file applies to, over the whole table (not only `where`).
    everything = (
        scanned
        if row_filter == parse_where(None, schema)
        else scan_data_files(table, snapshot, row_filter=parse_where(None, schema))
    )
    applies_to = delete_targets(everything)
    for path, reason in outcome.skipped:
        log.warning("left out %s: %s", path, reason)
    batch_of = {gid: number for number, batch in enumerate(outcome.commit_batches) for gid in batch}
    specs = metadata.specs()
    tasks = []
    for group in outcome.groups:
        files = [candidate.handle for candidate in group.files]
        tasks.append(
            envelope(
                REWRITE_TASK,
                {
                    "table": doc["table"],
                    "branch": branch,
                    "group_id": group.group_id,
                    "commit_batch": batch_of[group.group_id],
                    "base_snapshot_id": snapshot.snapshot_id,
                    "base_sequence_number": snapshot.sequence_number,
                    "strategy": chosen.value,
                    "sort_order": doc["sort_order"],
                    "options": doc["options"],
                    "output_spec_id": output_spec_id,
                    "needs_repartition": group.needs_repartition,
                    "input_bytes": group.input_bytes,
                    "data_files": [
                        scanned_to_json(f, specs, schema) for f in files if isinstance(f, ScannedFile)
                    ],
                    "removed_delete_files": removable_deletes(
                        [f for f in files if isinstance(f, ScannedFile)], applies_to, specs, schema
                    ),
                },
            )
        )
    log.info(
        "planned %d group(s) over %d of %d candidate file(s) of %s at snapshot %s",
        len(tasks),
        sum(len(g.files) for g in outcome.groups),
        len(candidates),
        doc["table"],
        snapshot.snapshot_id,
    )
    return envelope(
        COMPACTION_PLAN,
        {
            **doc,
            "tasks": tasks,
            "skipped": [{"path": p, "reason": r} for p, r in outcome.skipped],
            "commit_batches": [list(b) for b in outcome.commit_batches],
        },
    )


def execute_rewrite_task(table: Table, task: Mapping[str, Any], limits: ResourceLimits) -> dict[str, Any]:
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
    schema = metadata.schema()
    specs = metadata.specs()
    output_spec_id = int(task["output_spec_id"])
    if output_spec_id not in specs:
        raise ConfigurationError(f"task output spec {output_spec_id} is not a partition spec of the table")
    output_spec = specs[output_spec_id]
    entries = task["data_files"]
    scanned_inputs = [scanned_from_json(e, specs, schema) for e in entries]
    inputs = [f.data_file for f in scanned_inputs]
    delete_stats = DeleteStats()
    options = CompactionOptions.from_options(task.get("options"))
    strategy = _strategy(str(task.get("strategy", "binpack")))
    keys = parse_sort_order(task["sort_order"], schema) if task.get("sort_order") else ()
    # Rows moving to another spec are clustered by their new partition; an unpartitioned output has one.
    needs_order = strategy is Strategy.SORT or (
        bool(task.get("needs_repartition")) and not output_spec.is_unpartitioned()
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
    from pyiceberg.table.locations import load_location_provider

    group_id = str(task["group_id"])
    expected_rows = sum(f.record_count for f in inputs)
    with track_resources(limits) as (spill_dir, stats):
        writer = RollingDataFileWriter(
            io=table.io,
            location_provider=load_location_provider(metadata.location, metadata.properties),
            schema=schema,
            spec=output_spec,
            properties=metadata.properties,
            target_file_size_bytes=options.target_file_size_bytes,
            buffer_bytes=limits.writer_buffer_bytes,
            sort_order_id=sort_order_id,
            file_prefix=group_id,
        )
        # Every delete file that applies is applied: the rewrite keeps exactly the live rows. They are
        # read on a second thread while this one writes (decoding and encoding both release the GIL).
        live = read_ahead(
            iter_live_group_batches(
                table.io, metadata, scanned_inputs, limits=limits, spill_dir=spill_dir, stats=delete_stats
            ),
            depth=READ_AHEAD_BATCHES,
            max_bytes=READ_AHEAD_BYTES,
        )
        try:
            batches: Iterator[pa.RecordBatch] = live
            if needs_order:
                batches = sort_for_output(batches, keys, output_spec, schema, limits, spill_dir)
            splitter = PartitionSplitter(output_spec, schema)
            for batch in batches:
                for partition_key, run in splitter.split(batch):
                    writer.write(partition_key, run)
            added = writer.close()
            live_rows = delete_stats.rows_read - delete_stats.rows_deleted
            if delete_stats.rows_read != expected_rows or writer.rows_written != live_rows:
                raise IcebergExecError(
                    f"group {group_id} read {delete_stats.rows_read} of {expected_rows} rows, deleted "
                    f"{delete_stats.rows_deleted}, but wrote {writer.rows_written}; nothing committed"
                )
        except BaseException as err:
            live.close()
            writer.abort()
            mapped = resource_error(err)
            if mapped is err:
                raise
            raise mapped from err
        finally:
            live.close()
    added_bytes = sum(f.file_size_in_bytes for f in added)
    log.info(
        "group %s: %d file(s), %d bytes -> %d file(s), %d bytes, %d rows; peak RSS %d MiB, spilled %d MiB",
        group_id,
        len(inputs),
        sum(f.file_size_in_bytes for f in inputs),
        len(added),
        added_bytes,
        writer.rows_written,
        stats.peak_rss_bytes >> 20,
        stats.spilled_bytes >> 20,
    )
    return envelope(
        REWRITE_RESULT,
        {
            "table": task["table"],
            "branch": task.get("branch", "main"),
            "group_id": group_id,
            "commit_batch": task.get("commit_batch", 0),
            "base_snapshot_id": task["base_snapshot_id"],
            "options": task.get("options", {}),
            "rewritten_data_files": [e["data-file"] for e in entries],
            "added_data_files": [data_file_to_json(f, output_spec, schema) for f in added],
            "removed_delete_files": list(task.get("removed_delete_files", [])),
            "applied_deletes": {str(e["data-file"]["file-path"]): applied_deletes_of(e) for e in entries},
            "rewritten_bytes_count": sum(f.file_size_in_bytes for f in inputs),
            "added_bytes_count": added_bytes,
            "rewritten_records": expected_rows,
            "added_records": writer.rows_written,
            "deleted_records": delete_stats.rows_deleted,
            "position_deleted_records": delete_stats.position_deleted,
            "equality_deleted_records": delete_stats.equality_deleted,
            "peak_rss_bytes": stats.peak_rss_bytes,
            "spilled_bytes": stats.spilled_bytes,
            "elapsed_seconds": round(stats.elapsed_seconds, 3),
        },
    )


def commit_compaction(
    table: Table, results: Sequence[Mapping[str, Any]], *, commit_id: str, failed_data_files_count: int = 0
) -> dict[str, Any]:
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
    summary: dict[str, Any] = {
        "table": _table_name(table),
        "rewritten_data_files_count": 0,
        "added_data_files_count": 0,
        "rewritten_bytes_count": 0,
        "failed_data_files_count": failed_data_files_count,
        "removed_delete_files_count": 0,
        "snapshot_ids": [],
        "already_committed": False,
        "commits": [],
        "peak_rss_bytes": max((int(d.get("peak_rss_bytes", 0)) for d in docs), default=0),
        "spilled_bytes": sum(int(d.get("spilled_bytes", 0)) for d in docs),
    }
    if not docs:
        log.info("nothing to commit for %s", summary["table"])
        return envelope(COMPACTION_RESULT, summary)
    bases = {(d["table"], d["base_snapshot_id"], d["branch"]) for d in docs}
    if len(bases) != 1:
        raise ConfigurationError(
            f"results come from different plans {sorted(map(str, bases))}; commit each plan alone"
        )
    (name, base_snapshot_id, branch) = bases.pop()
    if name != summary["table"]:
        raise ConfigurationError(f"the results are for table {name}, not {summary['table']}")
    _check_groups_once(docs)
    options = CompactionOptions.from_options(docs[0].get("options"))
    batches: dict[int, list[Mapping[str, Any]]] = {}
    for doc in docs:
        batches.setdefault(int(doc["commit_batch"]), []).append(doc)
    refresh_table(table)
    check_branch(table.metadata, branch, _table_name(table))
    schema = table.metadata.schema()
    specs = table.metadata.specs()
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
        _verify_batch(table, BaseFiles(table, int(base_snapshot_id)), pending, specs, schema)
    failed_commits = 0
    all_already = True
    for number, batch in sorted(batches.items()):
        rewritten = [data_file_from_json(f, specs, schema) for d in batch for f in d["rewritten_data_files"]]
        added = [data_file_from_json(f, specs, schema) for d in batch for f in d["added_data_files"]]
        # The deletes to drop are decided by the commit, on the branch head it commits on (on every
        # retry): those the rewrite left dangling (the tasks' removed_delete_files are among them unless
        # a concurrent commit made them apply again) and, with remove-dangling-deletes, every other one.
        dangling = DanglingDeletes.ALL if options.remove_dangling_deletes else DanglingDeletes.REWRITTEN
        batch_id = _batch_id(commit_id, number, len(batches))
        try:
            outcome = commit_rewrite(
                table,
                base_snapshot_id=int(base_snapshot_id),
                rewritten_data_files=rewritten,
                added_data_files=added,
                commit_id=batch_id,
                use_starting_sequence_number=options.use_starting_sequence_number,
                branch=branch,
                dangling_deletes=dangling,
            )
        except (ConfigurationError, CommitValidationError) as err:
            # E.g. a format-version 3 table, or files gone meanwhile: nothing was committed, and the
            # validation fails again on any retry, so the new files are never committed. Only those the
            # table does not reference are removed (a rerun's files may be live through another commit).
            delete_unreferenced(table, [f.file_path for f in added], what=f"uncommitted output of {batch_id}")
            if isinstance(err, ConfigurationError) or not options.partial_progress_enabled:
                raise
            failed_commits += 1
            summary["failed_data_files_count"] += len(rewritten)
            log.warning("commit batch %d failed validation: %s", number, err)
            if failed_commits > options.max_failed_commits:
                raise CommitValidationError(
                    f"{failed_commits} commit batches failed, more than partial-progress.max-failed-commits="
                    f"{options.max_failed_commits}; last: {err}"
                ) from err
            continue
        all_already = all_already and outcome.already_committed
        summary["rewritten_data_files_count"] += len(rewritten)
        summary["added_data_files_count"] += len(added)
        summary["removed_delete_files_count"] += int(outcome.summary.get("removed-delete-files", "0"))
        summary["rewritten_bytes_count"] += sum(f.file_size_in_bytes for f in rewritten)
        summary["snapshot_ids"].append(outcome.snapshot_id)
        summary["commits"].append(
            {
                "commit_batch": number,
                "commit_id": batch_id,
                "snapshot_id": outcome.snapshot_id,
                "already_committed": outcome.already_committed,
                "group_ids": [d["group_id"] for d in batch],
            }
        )
        log.info(
            "commit batch %d: snapshot %s%s (%d files -> %d files)",
            number,
            outcome.snapshot_id,
            " (already committed)" if outcome.already_committed else "",
            len(rewritten),
            len(added),
        )
    summary["already_committed"] = bool(summary["commits"]) and all_already
    return envelope(COMPACTION_RESULT, summary)


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
) -> dict[str, Any]:
    """Plan, rewrite every group and commit: Spark's ``rewrite_data_files`` in one call.

    Groups run one after another, each bounded by ``limits``. Without partial progress a failing group
    removes what every group wrote and raises; with it, the failure is counted and the rest commit.

    >>> import tempfile, pyarrow as pa
    >>> from pyiceberg.catalog.sql import SqlCatalog
    >>> workdir = tempfile.TemporaryDirectory()
    >>> catalog = SqlCatalog("demo", uri=f"sqlite:///{workdir.name}/c.db", warehouse=f"file://{workdir.name}")
    >>> catalog.create_namespace("ns")
    >>> table = catalog.create_table("ns.t", schema=pa.schema([("id", pa.int64())]))
    >>> for i in range(5):  # Spark's default min-input-files
    ...     table.append(pa.table({"id": [i]}))
    >>> result = compact(table, options={"target-file-size-bytes": "134217728"}, limits=ResourceLimits())
    >>> result["rewritten_data_files_count"], result["added_data_files_count"], len(result["snapshot_ids"])
    (5, 1, 1)
    >>> compact(table)["snapshot_ids"]  # one file left: nothing to do
    []
    >>> catalog.engine.dispose(); workdir.cleanup()
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
    results: list[dict[str, Any]] = []
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
    outcome["plan"] = {
        "base_snapshot_id": plan["base_snapshot_id"],
        "groups": len(plan["tasks"]),
        "skipped": len(plan["skipped"]),
    }
    return outcome


def _landed_result(table: Table, branch: str, commit_id: str) -> dict[str, Any] | None:
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
    return envelope(
        COMPACTION_RESULT,
        {
            "table": _table_name(table),
            "rewritten_data_files_count": total("deleted-data-files"),
            "added_data_files_count": total("added-data-files"),
            "rewritten_bytes_count": total("removed-files-size"),
            "failed_data_files_count": 0,
            "removed_delete_files_count": total("removed-delete-files"),
            "snapshot_ids": [s.snapshot_id for s in landed],
            "already_committed": True,
            "commits": [
                {
                    "commit_id": s.summary.additional_properties.get(COMMIT_ID_PROPERTY)
                    if s.summary
                    else None,
                    "snapshot_id": s.snapshot_id,
                    "already_committed": True,
                }
                for s in landed
            ],
            "peak_rss_bytes": 0,
            "spilled_bytes": 0,
        },
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


def _verify_batch(
    table: Table,
    base_files: BaseFiles,
    batch: Sequence[Mapping[str, Any]],
    specs: Mapping[int, PartitionSpec],
    schema: Schema,
) -> None:
    """Prove each result of a commit batch against the base snapshot and the storage, rows included."""
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

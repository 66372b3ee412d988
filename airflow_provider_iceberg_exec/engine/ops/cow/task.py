"""Executing one copy-on-write task: probing each data file on the predicate's columns, then leaving it
untouched, removing it, or rewriting it without (or with updated) matching rows; loading an overwrite's
rows; writing the output files. One bounded execution per task.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.contracts import COW_RESULT, CowResult
from airflow_provider_iceberg_exec.engine.documents import (
    applied_deletes_of,
    check_base_snapshot,
    check_cow_task,
)
from airflow_provider_iceberg_exec.engine.errors import (
    ConfigurationError,
    DataFileReadError,
    IcebergExecError,
)
from airflow_provider_iceberg_exec.engine.io.lineage import (
    modified_rows_inherit_sequence,
    with_lineage_columns,
    without_lineage,
)
from airflow_provider_iceberg_exec.engine.io.read import READ_AHEAD_BATCHES, READ_AHEAD_BYTES, read_ahead
from airflow_provider_iceberg_exec.engine.io.session import (
    ExecutionStats,
    build_session,
    resource_error,
    track_resources,
)
from airflow_provider_iceberg_exec.engine.io.sorting import sort_for_output
from airflow_provider_iceberg_exec.engine.io.write import (
    PartitionSplitter,
    RollingDataFileWriter,
    check_required,
)
from airflow_provider_iceberg_exec.engine.meta.datafile_json import data_file_to_json
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedFile
from airflow_provider_iceberg_exec.engine.meta.task_files import has_equality_deletes, scanned_from_json
from airflow_provider_iceberg_exec.engine.ops.cow.common import parse_operation
from airflow_provider_iceberg_exec.engine.ops.cow.predicate import Predicate
from airflow_provider_iceberg_exec.engine.ops.cow.read import (
    Source,
    iter_source_batches,
    live_batches,
)
from airflow_provider_iceberg_exec.engine.ops.cow.update import Updater, parse_assignments
from airflow_provider_iceberg_exec.engine.progress import NOT_TRACKED, Tracker, track

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

__all__ = ["execute_cow_task"]

log = logging.getLogger(__name__)

_TARGET_FILE_SIZE_PROPERTY = "write.target-file-size-bytes"
_DEFAULT_TARGET_FILE_SIZE = 512 * 1024 * 1024


@dataclass
class _Counts:
    """What happened to some files: counts, the removed files (JSON) and the added ones."""

    deleted_rows: int = 0
    updated_rows: int = 0
    inserted_rows: int = 0
    rewritten_rows: int = 0
    delete_file_rows: int = 0
    read_bytes: int = 0
    probed_files: int = 0
    untouched_files: int = 0
    dropped_files: int = 0
    dropped_without_reading: int = 0
    rewritten_files: int = 0
    removed: list[dict[str, Any]] = field(default_factory=list)
    applied_deletes: dict[str, dict[str, Any]] = field(default_factory=dict)
    added: list[DataFile] = field(default_factory=list)

    def merge(self, other: _Counts) -> None:
        """Add ``other`` into this one (on one thread: the task's)."""
        for name in _COUNT_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.removed.extend(other.removed)
        self.applied_deletes.update(other.applied_deletes)
        self.added.extend(other.added)

    def remove(self, entry: Mapping[str, Any]) -> None:
        """Record the removal of a task entry's data file and the deletes applied to it."""
        self.removed.append(dict(entry["data-file"]))
        self.applied_deletes[str(entry["data-file"]["file-path"])] = applied_deletes_of(entry)


_COUNT_FIELDS = (
    "deleted_rows",
    "updated_rows",
    "inserted_rows",
    "rewritten_rows",
    "delete_file_rows",
    "read_bytes",
    "probed_files",
    "untouched_files",
    "dropped_files",
    "dropped_without_reading",
    "rewritten_files",
)


def execute_cow_task(table: Table, task: Mapping[str, Any], limits: ResourceLimits) -> CowResult:
    """Run one copy-on-write task in a bounded execution and return its result document.

    Each data file (see :mod:`~airflow_provider_iceberg_exec.engine.ops.cow`) is removed unread, or
    probed on the predicate's columns and then left untouched, removed, or rewritten without its matching
    rows (``delete``, ``overwrite``) or with them updated (``update``); files are rewritten on up to one
    thread per core while the memory limit allows. Rows loaded by ``overwrite`` are checked against the
    predicate and the required columns as they stream. On any failure every file this task wrote is
    removed.

    :returns: ``iceberg-exec/cow-result@1``: removed and added files as DataFile JSON, counts of rows,
        bytes read and written, peak RSS, spilled bytes.
    :raises ConfigurationError: for a malformed task, a task planned on another schema, an update whose
        values do not fit the table (a null in a required column, say), or loaded rows that do not match
        the predicate.
    :raises DataFileReadError: when an input file is missing or corrupt.
    :raises ResourceLimitError: when the memory pool or the spill disk runs out.
    """
    doc = check_cow_task(task)
    kind, output_spec = _check_task(table, doc)
    entries = list(doc.get("data_files") or [])
    sources = [
        Source(path=str(s["path"]), size_bytes=int(s["size-in-bytes"]), record_count=int(s["record-count"]))
        for s in doc.get("source_files") or []
    ]
    run = _Run(table, doc, kind, limits)
    files, size = task_totals(doc)
    with (
        track(kind, files_total=files, bytes_total=size, label=f"task {run.task_id}") as progress,
        track_resources(limits) as (spill_dir, stats),
    ):
        run.progress = progress
        try:
            run.execute(entries, sources, spill_dir)
        except BaseException as err:
            run.abort()
            mapped = resource_error(err)
            if mapped is err:
                raise
            raise mapped from err
    added = [*run.counts.added, *run.added]
    _log_task(kind, doc, run.counts, added, stats)
    return _result(
        doc, run.counts, added, [data_file_to_json(f, output_spec, run.schema) for f in added], stats
    )


def task_totals(task: Mapping[str, Any]) -> tuple[int, int]:
    """The files and bytes a (checked) task reads: its data files and its files to load."""
    sizes = [int(e["data-file"]["file-size-in-bytes"]) for e in task.get("data_files") or []]
    sizes += [int(s["size-in-bytes"]) for s in task.get("source_files") or []]
    return len(sizes), sum(sizes)


def _check_task(table: Table, doc: Mapping[str, Any]) -> tuple[str, PartitionSpec]:
    """Refuse a task planned on another table state; return its operation and output spec.

    :raises ConfigurationError: when the base snapshot or the schema changed, or the spec is unknown.
    """
    metadata = table.metadata
    if doc["base_snapshot_id"] is not None:
        check_base_snapshot(metadata, doc["base_snapshot_id"])
    schema = metadata.schema()
    if int(doc["schema_id"]) != schema.schema_id:
        raise ConfigurationError(
            f"the schema of {doc['table']} changed since planning (schema id {doc['schema_id']} -> "
            f"{schema.schema_id}); plan again"
        )
    kind = parse_operation(doc["operation"])
    specs = metadata.specs()
    output_spec_id = int(doc["output_spec_id"])
    if output_spec_id not in specs:
        raise ConfigurationError(f"task output spec {output_spec_id} is not a partition spec of the table")
    return kind, specs[output_spec_id]


def _log_task(
    kind: str, doc: Mapping[str, Any], counts: _Counts, added: Sequence[DataFile], stats: ExecutionStats
) -> None:
    """Log what the task did to its files and rows, and what it cost."""
    log.info(
        "%s task %s: %d file(s) rewritten, %d removed (%d unread), %d untouched, %d added (%d bytes); "
        "rows deleted %d, updated %d, inserted %d, copied %d; peak RSS %d MiB, spilled %d MiB",
        kind,
        doc.get("task_id"),
        counts.rewritten_files,
        counts.dropped_files,
        counts.dropped_without_reading,
        counts.untouched_files,
        len(added),
        sum(f.file_size_in_bytes for f in added),
        counts.deleted_rows,
        counts.updated_rows,
        counts.inserted_rows,
        counts.rewritten_rows,
        stats.peak_rss_bytes >> 20,
        stats.spilled_bytes >> 20,
    )


def _result(
    doc: Mapping[str, Any],
    counts: _Counts,
    added: Sequence[DataFile],
    added_json: list[dict[str, Any]],
    stats: ExecutionStats,
) -> CowResult:
    """The result document of a task (``doc``, validated) that did ``counts`` and wrote ``added``."""
    return {
        "schema": COW_RESULT,
        "table": doc["table"],
        "branch": doc["branch"],
        "operation": doc["operation"],
        "where": doc["where"],
        "set": doc.get("set"),
        "base_snapshot_id": doc["base_snapshot_id"],
        "isolation_level": doc["isolation_level"],
        "task_id": doc["task_id"],
        "removed_data_files": counts.removed,
        "applied_deletes": counts.applied_deletes,
        "added_data_files": added_json,
        "rewritten_data_files_count": counts.rewritten_files,
        "dropped_data_files_count": counts.dropped_files,
        "dropped_without_reading_count": counts.dropped_without_reading,
        "probed_data_files_count": counts.probed_files,
        "untouched_data_files_count": counts.untouched_files,
        "deleted_rows": counts.deleted_rows,
        "updated_rows": counts.updated_rows,
        "inserted_rows": counts.inserted_rows,
        "rewritten_rows": counts.rewritten_rows,
        "delete_file_rows": counts.delete_file_rows,
        "read_bytes": counts.read_bytes,
        "written_bytes": sum(f.file_size_in_bytes for f in added),
        "peak_rss_bytes": stats.peak_rss_bytes,
        "spilled_bytes": stats.spilled_bytes,
        "elapsed_seconds": round(stats.elapsed_seconds, 3),
    }


class _Run:
    """One task's execution: files processed (in parallel where rows stay in place), counts, writers.

    Files whose rows stay in their partition are processed on ``limits.file_workers`` threads, each file
    with its own reader and writer (PyArrow releases the GIL while it decodes, filters, encodes and
    compresses); the rows that must be clustered by partition go through one ordered stream afterwards.
    Every writer is kept, so that a failure removes whatever any of them wrote.
    """

    def __init__(self, table: Table, doc: Mapping[str, Any], kind: str, limits: ResourceLimits) -> None:
        from pyiceberg.table.locations import load_location_provider

        metadata = table.metadata
        self.table = table
        self.kind = kind
        self.limits = limits
        self.task_id = str(doc.get("task_id", 0))
        self.schema = metadata.schema()
        # v3: rows keep _row_id (and, when not updated, _last_updated_sequence_number), as Spark's CoW
        self.lineage = metadata.format_version >= 3
        self.write_schema = with_lineage_columns(self.schema) if self.lineage else self.schema
        self.specs = metadata.specs()
        self.output_spec = self.specs[int(doc["output_spec_id"])]
        self.predicate = Predicate(doc["where"], self.schema)
        self.assignments = parse_assignments(self.schema, doc.get("set")) if kind == "update" else []
        self.locations = load_location_provider(metadata.location, metadata.properties)
        self.target_file_size = int(
            metadata.properties.get(_TARGET_FILE_SIZE_PROPERTY, _DEFAULT_TARGET_FILE_SIZE)
        )
        self.sort_orders = {order.order_id: order for order in metadata.sort_orders}
        self.counts = _Counts()
        self.writers: list[RollingDataFileWriter] = []
        self.added: list[DataFile] = []
        self._updater: Updater | None = None
        self.spill_dir = ""  # set by execute
        self.progress: Tracker = NOT_TRACKED  # advanced as each data file and file to load is done
        self.set_ids = {a.field_id for a in self.assignments}
        self.moves_partitions = bool(self.set_ids & {f.source_id for f in self.output_spec.fields})

    # -- the task --------------------------------------------------------------------------------------

    def execute(
        self, entries: Sequence[Mapping[str, Any]], sources: Sequence[Source], spill_dir: str
    ) -> None:
        """Process every data file and file to load of the task; check the rows written add up."""
        self.spill_dir = spill_dir
        if self.kind == "update":
            self._updater = Updater(build_session(self.limits, spill_dir), self.assignments)
        ordered = _Counts()  # filled while the ordered stream is consumed, merged once it is written
        in_place, to_order = self._sort_out(entries, ordered)
        self._rewrite_in_place(in_place)
        to_order.extend(functools.partial(self._load, source) for source in sources)
        if to_order:
            batches: Iterator[pa.RecordBatch] = (batch for make in to_order for batch in make())
            if not self.output_spec.is_unpartitioned():
                batches = sort_for_output(batches, (), self.output_spec, self.schema, self.limits, spill_dir)
            self.added.extend(self._write(batches, sort_order_id=None))
        self.counts.merge(ordered)
        expected = self.counts.rewritten_rows + self.counts.updated_rows + self.counts.inserted_rows
        written = sum(writer.rows_written for writer in self.writers)
        if written != expected:
            raise IcebergExecError(
                f"task {self.task_id} kept {expected} rows but wrote {written}; nothing committed"
            )

    def _sort_out(
        self, entries: Sequence[Mapping[str, Any]], ordered: _Counts
    ) -> tuple[list[tuple[Mapping[str, Any], ScannedFile]], list[Callable[[], Iterator[pa.RecordBatch]]]]:
        """Remove the files that go unread; return the files rewritten in place and the row streams (of
        files probed now, counted into ``ordered``) that must be clustered by partition.
        """
        in_place: list[tuple[Mapping[str, Any], ScannedFile]] = []
        to_order: list[Callable[[], Iterator[pa.RecordBatch]]] = []
        for entry in entries:
            scanned = scanned_from_json(entry, self.specs, self.schema)
            if entry.get("all-rows-match"):
                self.counts.merge(self._drop_unread(entry, scanned.data_file))
                self._done(scanned.data_file.file_size_in_bytes)
            elif self._needs_order(scanned.data_file):
                rewrite = self._triage(entry, scanned, ordered)
                if rewrite is None:
                    self._done(scanned.data_file.file_size_in_bytes)
                else:
                    to_order.append(self._done_after(rewrite, scanned.data_file.file_size_in_bytes))
            else:
                in_place.append((entry, scanned))
        return in_place, to_order

    def _rewrite_in_place(self, in_place: Sequence[tuple[Mapping[str, Any], ScannedFile]]) -> None:
        """Probe and rewrite the files whose rows stay in their partition, on up to
        ``limits.file_workers`` threads."""
        from concurrent.futures import ThreadPoolExecutor

        workers = min(self.limits.file_workers, len(in_place))
        if any(has_equality_deletes(scanned) for _, scanned in in_place):
            workers = 1  # each equality-delete anti-join takes its own share of the memory limit
        if workers <= 1:
            for item in in_place:
                self.counts.merge(self._in_place(*item))
            return
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="iceberg-exec-cow")
        try:
            for outcome in pool.map(lambda item: self._in_place(*item), in_place):
                self.counts.merge(outcome)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def abort(self) -> None:
        for writer in self.writers:
            writer.abort()
        self.added = []
        self.counts.added = []

    # -- one data file ---------------------------------------------------------------------------------

    def _drop_unread(self, entry: Mapping[str, Any], data_file: DataFile) -> _Counts:
        if self.kind == "update":
            raise ConfigurationError("an update task cannot remove files unread")
        if entry.get("delete-files"):
            raise ConfigurationError(f"{data_file.file_path} has delete files: it cannot be removed unread")
        outcome = _Counts(deleted_rows=data_file.record_count, dropped_files=1, dropped_without_reading=1)
        outcome.remove(entry)
        return outcome

    def _in_place(self, entry: Mapping[str, Any], scanned: ScannedFile) -> _Counts:
        """Probe one data file and, when it must change, rewrite it into files of its own partition."""
        outcome = _Counts()
        rewrite = self._triage(entry, scanned, outcome)
        if rewrite is not None:
            # Read and filter on one thread, encode and write on this one: the two overlap.
            with closing(
                read_ahead(rewrite(), depth=READ_AHEAD_BATCHES, max_bytes=READ_AHEAD_BYTES)
            ) as batches:
                added = self._write(batches, sort_order_id=self._kept_sort_order(scanned))
            outcome.added.extend(added)
        self._done(scanned.data_file.file_size_in_bytes)
        return outcome

    def _done(self, size_bytes: int) -> None:
        self.progress.advance(files=1, bytes_done=size_bytes)

    def _done_after(
        self, rows: Callable[[], Iterator[pa.RecordBatch]], size_bytes: int
    ) -> Callable[[], Iterator[pa.RecordBatch]]:
        """``rows``, reporting the file done once its rows are streamed out."""

        def stream() -> Iterator[pa.RecordBatch]:
            yield from rows()
            self._done(size_bytes)

        return stream

    def _triage(
        self, entry: Mapping[str, Any], scanned: ScannedFile, outcome: _Counts
    ) -> Callable[[], Iterator[pa.RecordBatch]] | None:
        """Decide what happens to one data file; return the stream of its rewritten rows, if any."""
        data_file = scanned.data_file
        probed = self._probe(scanned, outcome)
        if probed is not None and probed[0] == 0:
            outcome.untouched_files += 1
            log.debug("no live row of %s matches: left untouched", data_file.file_path)
            return None
        outcome.remove(entry)
        if probed is not None and self.kind != "update":
            outcome.deleted_rows += probed[0]
            outcome.delete_file_rows += data_file.record_count - probed[1]
            outcome.dropped_files += 1
            return None
        outcome.rewritten_files += 1
        outcome.read_bytes += data_file.file_size_in_bytes
        expected = probed[0] if probed is not None else None
        return lambda: self._rewrite(scanned, expected, outcome)

    def _probe(self, scanned: ScannedFile, outcome: _Counts) -> tuple[int, int] | None:
        """Read only the predicate's columns of a data file: how many of its live rows match.

        Returns ``(matched, live rows)`` when no row or every live row matches, and ``None`` as soon as the
        file is known to hold both matching and other rows (it will be rewritten, which counts them), so the
        probe of a file that must be rewritten usually stops after its first batch. A file with delete
        files is read in full through the delete-applying reader.
        """
        import pyarrow.compute as pc
        from pyiceberg.schema import prune_columns

        outcome.probed_files += 1
        if not self.predicate.field_ids and not scanned.delete_files:
            # a constant predicate: true here (false was pruned)
            return int(scanned.data_file.record_count), int(scanned.data_file.record_count)
        projection = prune_columns(self.schema, self.predicate.field_ids, select_full_types=False)
        matched = seen = 0
        batches = self._read(scanned, projection)
        try:
            for batch in batches:
                matched += int(pc.sum(self.predicate.matches(batch)).as_py() or 0)
                seen += batch.num_rows
                if 0 < matched < seen:
                    return None
        finally:
            batches.close()  # type: ignore[attr-defined]  # a generator: closes the file now
        return matched, seen

    def _rewrite(
        self, scanned: ScannedFile, expected_matches: int | None, outcome: _Counts
    ) -> Iterator[pa.RecordBatch]:
        """The live rows of a data file that stay: without the matching ones, or with them updated.

        :param expected_matches: the probe's count, or ``None`` for "some rows, not all".
        """
        import pyarrow.compute as pc

        data_file = scanned.data_file
        matched_total = seen = 0
        for batch in self._read(scanned, self.schema, lineage=self.lineage):
            mask = self.predicate.matches(batch)
            matched = int(pc.sum(mask).as_py() or 0)
            matched_total += matched
            seen += batch.num_rows
            if self.kind == "update":
                if self._updater is None:  # pragma: no cover - execute sets it for updates
                    raise RuntimeError("no updater")
                out = self._updater.apply(batch, mask, matched)
                if self.lineage and matched:
                    out = modified_rows_inherit_sequence(out, mask)
                outcome.updated_rows += matched
                outcome.rewritten_rows += batch.num_rows - matched
            else:
                out = batch.filter(pc.invert(mask)) if matched else batch
                outcome.deleted_rows += matched
                outcome.rewritten_rows += out.num_rows
            yield out
        outcome.delete_file_rows += data_file.record_count - seen
        consistent = (
            0 < matched_total < seen if expected_matches is None else matched_total == expected_matches
        )
        if not consistent:
            raise DataFileReadError(
                f"{data_file.file_path}: {matched_total} rows matched on the second read, not what the first "
                "read found; the file changed while it was read"
            )

    def _read(
        self, scanned: ScannedFile, projection: Schema, *, lineage: bool = False
    ) -> Iterator[pa.RecordBatch]:
        """The rows of a data file: its live rows, all columns, when it has delete files."""
        return live_batches(self.table, scanned, projection, self.limits, self.spill_dir, lineage=lineage)

    def _needs_order(self, data_file: DataFile) -> bool:
        """Whether the file's rows may land in several partitions of the output spec."""
        if self.output_spec.is_unpartitioned():
            return False
        return data_file.spec_id != self.output_spec.spec_id or self.moves_partitions

    def _kept_sort_order(self, scanned: ScannedFile) -> int | None:
        """The input's sort order id when the output keeps its row order (filtered, sort keys unchanged).

        An equality-delete anti-join does not keep the row order.
        """
        order_id = scanned.data_file.sort_order_id
        if order_id is None or order_id not in self.sort_orders or has_equality_deletes(scanned):
            return None
        if self.set_ids & {f.source_id for f in self.sort_orders[order_id].fields}:
            return None
        return order_id

    # -- loaded rows -----------------------------------------------------------------------------------

    def _load(self, source: Source) -> Iterator[pa.RecordBatch]:
        """The rows of a Parquet file to load, each checked against the predicate and the schema."""
        import pyarrow.compute as pc

        self.counts.read_bytes += source.size_bytes
        for batch in iter_source_batches(self.table, source, self.limits.batch_size):
            check_required(batch, self.schema, f"overwrite from {source.path}")
            mask = self.predicate.matches(batch)
            matched = int(pc.sum(mask).as_py() or 0)
            if matched != batch.num_rows:
                example = batch.filter(pc.invert(mask)).slice(0, 1).to_pylist()
                raise ConfigurationError(
                    f"Cannot append file with rows that do not match filter: {self.predicate.text}: "
                    f"{batch.num_rows - matched} row(s) of {source.path} do not match it, e.g. {example[0]}; "
                    "nothing was committed"
                )
            self.counts.inserted_rows += batch.num_rows
            yield without_lineage(batch) if self.lineage else batch
        self._done(source.size_bytes)

    # -- writing ---------------------------------------------------------------------------------------

    def _write(self, batches: Iterator[pa.RecordBatch], *, sort_order_id: int | None) -> list[DataFile]:
        writer = RollingDataFileWriter(
            io=self.table.io,
            location_provider=self.locations,
            schema=self.write_schema,
            spec=self.output_spec,
            properties=self.table.metadata.properties,
            target_file_size_bytes=self.target_file_size,
            buffer_bytes=self.limits.writer_buffer_bytes,
            sort_order_id=sort_order_id,
            file_prefix=f"cow-{self.task_id}",
        )
        self.writers.append(writer)  # list.append is atomic: worker threads share this list
        splitter = PartitionSplitter(self.output_spec, self.schema)
        for batch in batches:
            for partition_key, run in splitter.split(batch):
                writer.write(partition_key, run)
            self.progress.advance(rows=batch.num_rows)
        return writer.close()

"""Copy-on-write delete, update and overwrite by predicate, streamed within a memory limit.

Three steps that exchange small JSON documents, as compaction's do (one process: :func:`cow_rewrite`; the
CLI; or Airflow tasks)::

    plan_cow_rewrite -> tasks (files to read, files to drop, Parquet files to load)
    execute_cow_task per task -> result (removed and added files as DataFile JSON, counts)
    commit_cow_rewrite -> one ``overwrite`` snapshot (``delete`` when nothing is added), Java's OverwriteFiles

**Which rows match.** The predicate is PyIceberg's row-filter syntax (``"user_id = 42 and day >=
'2026-01-01'"``). A row matches when the predicate is TRUE under SQL's three-valued logic: a comparison
with null is unknown, so ``x != 5`` and ``x not in (1, 2)`` never match a null ``x`` (as Spark's
``DELETE ... WHERE`` and PyIceberg's ``Table.delete`` leave such rows in place); ``not`` is pushed down to
the comparisons as PyIceberg does; NaN compares as IEEE 754 (``x > 5`` and ``x = 5`` are false for NaN,
``x != 5`` true; ``x is nan`` matches it).

**Which files are touched.** Planning reads metadata only:

- data files that cannot hold a matching row (partition and column-metrics pruning,
  :func:`~airflow_provider_iceberg_exec.engine.meta.scan.scan_data_files`) are not listed at all;
- for ``delete`` and ``overwrite``, a file in which every row matches -- provable from its partition
  (PyIceberg's strict projection) or its column metrics (PyIceberg's strict metrics evaluator), where the
  columns involved hold no null -- is removed without being read;
- every other listed file is read, first only the predicate's columns, to count its matching rows: a file
  without a match is left untouched (not rewritten, not in the commit); a file whose rows all match is
  removed (``delete``, ``overwrite``); only the others are read in full and rewritten.

**Streaming.** A rewrite reads a file with the bounded reader (:mod:`.read`), filters each batch (or, for
``update``, evaluates the ``SET`` expressions over its matching rows with DataFusion) and writes it with
the rolling writer (:mod:`.write`), one output per input file, so a file's layout and sort order survive.
Files are rewritten on up to one thread per core, each with one reader and one writer, as long as the
memory limit holds four writer buffers per thread. Only rows that must change partition (an update of a
partition column, files of an older spec, rows loaded by ``overwrite``) are clustered by partition through
DataFusion's spilling sort over a staged copy, as compaction does.

**Deletes.** A data file with delete files (position deletes, deletion vectors, equality deletes) is
read through :func:`~.deletes.apply.iter_live_group_batches`, as compaction
reads it: in the probe (all columns then, not only the predicate's) and in the rewrite, so a deleted row
is neither counted as matching nor copied. Such a file is never removed unread (its live row count is not
in the metadata). When it is removed or rewritten, the delete files that applied only to removed files
(its deletion vector, file-scoped position deletes, and any other delete no live file needs any more)
are removed in the same commit; those that still apply to a file left in place stay. The commit decides
which on every attempt, against the branch head it commits on (``DanglingDeletes.REWRITTEN``), so a
concurrent commit that makes a delete apply to another live file again keeps it. Files with equality
deletes are rewritten one at a time (their anti-join has a share of the memory limit of its own).
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyiceberg.expressions.visitors import BoundBooleanExpressionVisitor, bind, rewrite_not, visit

from airflow_provider_iceberg_exec.engine.commit.cleanup import delete_unreferenced, uris_of
from airflow_provider_iceberg_exec.engine.commit.snapshots import (
    DanglingDeletes,
    IsolationLevel,
    commit_overwrite,
    find_commit,
)
from airflow_provider_iceberg_exec.engine.commit.verification import BaseFiles, check_rows, verify_added_files
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.contracts import (
    COW_COMMIT_RESULT,
    COW_PLAN,
    COW_RESULT,
    COW_TASK,
    envelope,
)
from airflow_provider_iceberg_exec.engine.deletes.apply import DeleteStats, iter_live_group_batches
from airflow_provider_iceberg_exec.engine.documents import (
    applied_deletes_of,
    check_base_snapshot,
    check_cow_result,
    check_cow_task,
)
from airflow_provider_iceberg_exec.engine.errors import (
    CommitStateUnknownError,
    CommitValidationError,
    ConfigurationError,
    DataFileCodecError,
    DataFileReadError,
    IcebergExecError,
    first_line,
)
from airflow_provider_iceberg_exec.engine.io.catalog import refresh_table
from airflow_provider_iceberg_exec.engine.io.read import (
    READ_AHEAD_BATCHES,
    READ_AHEAD_BYTES,
    iter_data_file_batches,
    read_ahead,
    read_batch_rows,
)
from airflow_provider_iceberg_exec.engine.io.session import build_session, resource_error, track_resources
from airflow_provider_iceberg_exec.engine.io.sorting import sort_for_output
from airflow_provider_iceberg_exec.engine.io.write import PartitionSplitter, RollingDataFileWriter, column_of
from airflow_provider_iceberg_exec.engine.meta.datafile_json import data_file_from_json, data_file_to_json
from airflow_provider_iceberg_exec.engine.meta.scan import (
    ScannedFile,
    check_branch,
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

if TYPE_CHECKING:
    import pyarrow as pa
    from datafusion import SessionContext
    from pyiceberg.expressions import BooleanExpression, BoundTerm
    from pyiceberg.expressions.literals import Literal
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.typedef import Record

__all__ = [
    "COW_OPERATIONS",
    "DEFAULT_TASK_SIZE_BYTES",
    "commit_cow_rewrite",
    "cow_rewrite",
    "execute_cow_task",
    "plan_cow_rewrite",
]

log = logging.getLogger(__name__)

#: the operations, in the CLI's and the task documents' spelling
COW_OPERATIONS = ("delete", "update", "overwrite")
#: input bytes (of files to read, and of Parquet files to load) per task; tasks map to Airflow tasks
DEFAULT_TASK_SIZE_BYTES = 1 << 30

# Java's TableProperties. An overwrite by predicate deletes the rows matching it before it appends: it
# follows the delete level (Spark has no table property for INSERT OVERWRITE).
_ISOLATION_PROPERTIES = {
    "delete": "write.delete.isolation-level",
    "update": "write.update.isolation-level",
    "overwrite": "write.delete.isolation-level",
}
_TARGET_FILE_SIZE_PROPERTY = "write.target-file-size-bytes"
_DEFAULT_TARGET_FILE_SIZE = 512 * 1024 * 1024
_SET_ALIAS = "__iceberg_exec_set_{}"


# -------------------------------------------------------------------------------------------- predicate


class _Predicate:
    """A user predicate bound to a schema: row matching per batch and the "every row matches" proofs."""

    def __init__(self, where: str | None, schema: Schema) -> None:
        from pyiceberg.types import DoubleType, FloatType

        if where is None or not str(where).strip():
            raise ConfigurationError(
                "a predicate is required (where); use 'true' to match every row, e.g. \"user_id = 42\""
            )
        self.text = str(where)
        self.schema = schema
        self.unbound: BooleanExpression = parse_where(self.text, schema)
        self.bound: BooleanExpression = bind(schema, rewrite_not(self.unbound), case_sensitive=True)
        self.field_ids: set[int] = visit(self.bound, _FieldIds(all_leaves=True))
        # Columns whose null (or NaN) values SQL and Iceberg's evaluators treat differently: all but those
        # only tested by "is null" / "is not null".
        self.value_field_ids: set[int] = visit(self.bound, _FieldIds(all_leaves=False))
        self.float_field_ids = {
            fid for fid in self.value_field_ids if isinstance(schema.find_type(fid), (FloatType, DoubleType))
        }

    def matches(self, batch: pa.RecordBatch) -> pa.BooleanArray:
        """Which rows of ``batch`` (in the table schema, or a projection of it) match: no nulls."""
        import pyarrow.compute as pc

        result = visit(self.bound, _MatchVisitor(batch, self.schema))
        return pc.fill_null(result, False)

    def strict_evaluator(self, metadata: TableMetadata) -> Callable[[DataFile], bool]:
        """A test "does every row of this file match?", from its partition or its column metrics.

        ``False`` means "cannot tell". Neither PyIceberg evaluator knows SQL's nulls (for them ``x != 5``
        holds for a null ``x``), so a proof counts only when the columns the predicate compares hold no
        null (and, for floating-point columns, the NaN counts are known).
        """
        from pyiceberg.expressions.visitors import (
            _StrictMetricsEvaluator,
            expression_evaluator,
            strict_projection,
        )
        from pyiceberg.schema import Schema

        schema = metadata.schema()
        specs = metadata.specs()
        metrics = _StrictMetricsEvaluator(schema, self.unbound, case_sensitive=True)
        partition_evaluators: dict[int, Callable[[Record], bool]] = {}

        def partition_proves(data_file: DataFile) -> bool:
            spec = specs[data_file.spec_id]
            for position, partition_field in enumerate(spec.fields):
                if partition_field.source_id in self.value_field_ids and _null_or_nan(
                    data_file.partition[position]
                ):
                    return False
            if data_file.spec_id not in partition_evaluators:
                projected = strict_projection(schema, spec, case_sensitive=True)(self.unbound)
                partition_schema = Schema(*spec.partition_type(schema).fields)
                partition_evaluators[data_file.spec_id] = expression_evaluator(
                    partition_schema, projected, case_sensitive=True
                )
            return bool(partition_evaluators[data_file.spec_id](data_file.partition))

        def metrics_prove(data_file: DataFile) -> bool:
            nulls = data_file.null_value_counts or {}
            nans = data_file.nan_value_counts or {}
            if any(nulls.get(fid) != 0 for fid in self.value_field_ids):
                return False
            if any(nans.get(fid) is None for fid in self.float_field_ids):
                return False
            return bool(metrics.eval(data_file))

        def all_rows_match(data_file: DataFile) -> bool:
            try:
                return partition_proves(data_file) or metrics_prove(data_file)
            except (ValueError, TypeError) as err:  # an unusual type or a nested column: cannot tell
                log.debug("cannot prove %s fully matches: %s", data_file.file_path, err)
                return False

        return all_rows_match


def _null_or_nan(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


class _FieldIds(BoundBooleanExpressionVisitor[set[int]]):
    """The field ids a bound predicate reads; without ``all_leaves``, leaving out null tests."""

    def __init__(self, *, all_leaves: bool) -> None:
        self._all = all_leaves

    def _id(self, term: BoundTerm) -> set[int]:
        return {term.ref().field.field_id}

    def visit_in(self, term: BoundTerm, literals: set[Any]) -> set[int]:
        return self._id(term)

    def visit_not_in(self, term: BoundTerm, literals: set[Any]) -> set[int]:
        return self._id(term)

    def visit_is_nan(self, term: BoundTerm) -> set[int]:
        return self._id(term)

    def visit_not_nan(self, term: BoundTerm) -> set[int]:
        return self._id(term)

    def visit_is_null(self, term: BoundTerm) -> set[int]:
        return self._id(term) if self._all else set()

    def visit_not_null(self, term: BoundTerm) -> set[int]:
        return self._id(term) if self._all else set()

    def visit_equal(self, term: BoundTerm, literal: Literal[Any]) -> set[int]:
        return self._id(term)

    def visit_not_equal(self, term: BoundTerm, literal: Literal[Any]) -> set[int]:
        return self._id(term)

    def visit_greater_than_or_equal(self, term: BoundTerm, literal: Literal[Any]) -> set[int]:
        return self._id(term)

    def visit_greater_than(self, term: BoundTerm, literal: Literal[Any]) -> set[int]:
        return self._id(term)

    def visit_less_than(self, term: BoundTerm, literal: Literal[Any]) -> set[int]:
        return self._id(term)

    def visit_less_than_or_equal(self, term: BoundTerm, literal: Literal[Any]) -> set[int]:
        return self._id(term)

    def visit_starts_with(self, term: BoundTerm, literal: Literal[Any]) -> set[int]:
        return self._id(term)

    def visit_not_starts_with(self, term: BoundTerm, literal: Literal[Any]) -> set[int]:
        return self._id(term)

    def visit_true(self) -> set[int]:
        return set()

    def visit_false(self) -> set[int]:
        return set()

    def visit_not(self, child_result: set[int]) -> set[int]:
        return child_result

    def visit_and(self, left_result: set[int], right_result: set[int]) -> set[int]:
        return left_result | right_result

    def visit_or(self, left_result: set[int], right_result: set[int]) -> set[int]:
        return left_result | right_result


class _MatchVisitor(BoundBooleanExpressionVisitor["pa.Array"]):
    """Evaluate a bound predicate (``not`` already pushed down) over one batch, with SQL's nulls.

    Comparisons give null for a null value and Kleene logic combines them; ``in`` and ``not in`` give
    false for one. With no negation above the leaves, a false leaf and a null leaf give the same rows.
    """

    def __init__(self, batch: pa.RecordBatch, schema: Schema) -> None:
        self._batch = batch
        self._schema = schema

    def _values(self, term: BoundTerm) -> pa.Array:
        name = self._schema.find_column_name(term.ref().field.field_id)
        if name is None:  # pragma: no cover - binding found the field
            raise ConfigurationError(f"column of field id {term.ref().field.field_id} is not in the schema")
        return column_of(self._batch, name)

    def _scalar(self, term: BoundTerm, value: Any) -> pa.Scalar:
        import pyarrow as pa

        values = self._values(term)
        try:
            return pa.scalar(value, type=values.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as err:
            raise ConfigurationError(
                f"cannot compare column {term.ref().field.name} ({values.type}) with {value!r}: {err}"
            ) from err

    def _compare(self, function: str, term: BoundTerm, literal: Literal[Any]) -> pa.Array:
        import pyarrow.compute as pc

        return pc.call_function(function, [self._values(term), self._scalar(term, literal.value)])

    def _value_set(self, term: BoundTerm, literals: set[Any]) -> pa.Array:
        import pyarrow as pa

        return pa.array(list(literals), type=self._values(term).type)

    def visit_in(self, term: BoundTerm, literals: set[Any]) -> pa.Array:
        import pyarrow.compute as pc

        # False rather than null for a null value: the same once no negation is left above it.
        return pc.is_in(self._values(term), value_set=self._value_set(term, literals))

    def visit_not_in(self, term: BoundTerm, literals: set[Any]) -> pa.Array:
        import pyarrow.compute as pc

        values = self._values(term)
        found = pc.is_in(values, value_set=self._value_set(term, literals))
        return pc.and_kleene(pc.invert(found), pc.is_valid(values))

    def visit_is_nan(self, term: BoundTerm) -> pa.Array:
        import pyarrow.compute as pc

        return pc.is_nan(self._values(term))

    def visit_not_nan(self, term: BoundTerm) -> pa.Array:
        import pyarrow.compute as pc

        return pc.invert(pc.is_nan(self._values(term)))

    def visit_is_null(self, term: BoundTerm) -> pa.Array:
        import pyarrow.compute as pc

        return pc.is_null(self._values(term), nan_is_null=False)

    def visit_not_null(self, term: BoundTerm) -> pa.Array:
        import pyarrow.compute as pc

        return pc.is_valid(self._values(term))

    def visit_equal(self, term: BoundTerm, literal: Literal[Any]) -> pa.Array:
        return self._compare("equal", term, literal)

    def visit_not_equal(self, term: BoundTerm, literal: Literal[Any]) -> pa.Array:
        return self._compare("not_equal", term, literal)

    def visit_greater_than_or_equal(self, term: BoundTerm, literal: Literal[Any]) -> pa.Array:
        return self._compare("greater_equal", term, literal)

    def visit_greater_than(self, term: BoundTerm, literal: Literal[Any]) -> pa.Array:
        return self._compare("greater", term, literal)

    def visit_less_than(self, term: BoundTerm, literal: Literal[Any]) -> pa.Array:
        return self._compare("less", term, literal)

    def visit_less_than_or_equal(self, term: BoundTerm, literal: Literal[Any]) -> pa.Array:
        return self._compare("less_equal", term, literal)

    def visit_starts_with(self, term: BoundTerm, literal: Literal[Any]) -> pa.Array:
        import pyarrow.compute as pc

        return pc.starts_with(self._values(term), pattern=str(literal.value))

    def visit_not_starts_with(self, term: BoundTerm, literal: Literal[Any]) -> pa.Array:
        import pyarrow.compute as pc

        return pc.invert(pc.starts_with(self._values(term), pattern=str(literal.value)))

    def _constant(self, value: bool) -> pa.Array:
        import pyarrow as pa

        return pa.repeat(pa.scalar(value, pa.bool_()), self._batch.num_rows)

    def visit_true(self) -> pa.Array:
        return self._constant(True)

    def visit_false(self) -> pa.Array:
        return self._constant(False)

    def visit_not(self, child_result: pa.Array) -> pa.Array:  # pragma: no cover - rewrite_not removed it
        raise ValueError("NOT should have been rewritten")

    def visit_and(self, left_result: pa.Array, right_result: pa.Array) -> pa.Array:
        import pyarrow.compute as pc

        return pc.and_kleene(left_result, right_result)

    def visit_or(self, left_result: pa.Array, right_result: pa.Array) -> pa.Array:
        import pyarrow.compute as pc

        return pc.or_kleene(left_result, right_result)


# ----------------------------------------------------------------------------------------------- update


@dataclass(frozen=True)
class _Assignment:
    position: int
    name: str
    expression: str
    required: bool
    field_id: int


def _assignments(schema: Schema, set_columns: Mapping[str, str] | None) -> list[_Assignment]:
    """Check ``{column: SQL expression}`` against the schema: top-level columns, each once."""
    if not set_columns:
        raise ConfigurationError("an update needs at least one assignment, e.g. set amount = amount * 1.1")
    names = [column.name for column in schema.columns]
    out = []
    for name, expression in set_columns.items():
        if name not in names:
            raise ConfigurationError(
                f"cannot set {name!r}: not a top-level column of the table; columns: {', '.join(names)}"
            )
        if not isinstance(expression, str) or not expression.strip():
            raise ConfigurationError(f"the expression for {name!r} is empty")
        table_field = schema.find_field(name)
        out.append(
            _Assignment(
                position=names.index(name),
                name=name,
                expression=expression.strip(),
                required=table_field.required,
                field_id=table_field.field_id,
            )
        )
    return out


class _Updater:
    """Evaluate the ``SET`` expressions with DataFusion over the matching rows of one batch at a time.

    Each batch's matching rows become an anonymous DataFusion frame (``read_batch``) from which the
    expressions are selected; the results are cast to the table's column types (a value that does not
    fit, or a null for a required column, is a :class:`ConfigurationError`) and put back in place, so
    the rows keep their order.
    """

    def __init__(self, ctx: SessionContext, assignments: Sequence[_Assignment]) -> None:
        self._ctx = ctx
        self._lock = threading.Lock()  # one batch at a time through the shared session
        self._assignments = list(assignments)
        self._exprs = [f'({a.expression}) AS "{_SET_ALIAS.format(i)}"' for i, a in enumerate(assignments)]

    def check(self, arrow_schema: pa.Schema) -> None:
        """Compile the expressions against an empty batch of ``arrow_schema``; check the result types.

        :raises ConfigurationError: for an expression DataFusion cannot plan, or a result type that cannot
            be stored in its column, or a null literal for a required column.
        """
        import pyarrow as pa

        empty = pa.RecordBatch.from_arrays(
            [pa.array([], type=f.type) for f in arrow_schema], schema=arrow_schema
        )
        result = self._select(empty).schema()
        for i, assignment in enumerate(self._assignments):
            produced = result.field(i).type
            target = arrow_schema.field(assignment.position).type
            if pa.types.is_null(produced) and assignment.required:
                raise ConfigurationError(
                    f"set {assignment.name} = {assignment.expression}: gives null for required column "
                    f"{assignment.name}"
                )
            try:
                pa.array([], type=produced).cast(target)
            except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError) as err:
                raise ConfigurationError(
                    f"set {assignment.name} = {assignment.expression}: a {produced} cannot be stored in "
                    f"column {assignment.name} ({target}): {err}"
                ) from err

    def _select(self, batch: pa.RecordBatch) -> Any:
        try:
            return self._ctx.read_batch(batch).select_exprs(*self._exprs)
        except Exception as err:  # DataFusion raises bare Exception / ValueError for plan errors
            raise ConfigurationError(f"cannot evaluate {self._describe()}: {first_line(err)}") from err

    def _describe(self) -> str:
        return "set " + ", ".join(f"{a.name} = {a.expression}" for a in self._assignments)

    def apply(self, batch: pa.RecordBatch, mask: pa.BooleanArray, matched: int) -> pa.RecordBatch:
        """Return ``batch`` with the assignments applied to the rows where ``mask`` is true."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if matched == 0:
            return batch
        rows = batch.filter(mask)
        with self._lock:
            frame = self._select(rows)
            try:
                produced = [chunk.to_pyarrow() for chunk in frame.execute_stream()]
            except Exception as err:  # a runtime error of an expression (overflow, division by zero, ...)
                mapped = resource_error(err)
                if mapped is not err:
                    raise mapped from err
                raise ConfigurationError(f"cannot evaluate {self._describe()}: {first_line(err)}") from err
        values = pa.Table.from_batches(produced, schema=frame.schema()) if produced else None
        if values is None or values.num_rows != matched:  # pragma: no cover - a projection keeps rows
            raise IcebergExecError(f"{self._describe()} returned another number of rows than it was given")
        # Row i of the output: the original row i, or the next updated value where the mask is true.
        count = batch.num_rows
        running = pc.cumulative_sum(pc.cast(mask, pa.int64()))
        ordinal = pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), count)), 1)
        take = pc.if_else(mask, pc.add(running, count - 1), ordinal)
        columns = list(batch.columns)
        for i, assignment in enumerate(self._assignments):
            target = batch.schema.field(assignment.position).type
            try:
                new = values.column(i).combine_chunks().cast(target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as err:
                raise ConfigurationError(
                    f"set {assignment.name} = {assignment.expression}: a value does not fit column "
                    f"{assignment.name} ({target}): {first_line(err)}; nothing was committed"
                ) from err
            if assignment.required and new.null_count:
                raise ConfigurationError(
                    f"set {assignment.name} = {assignment.expression}: gives null for {new.null_count} "
                    f"row(s) but {assignment.name} is a required column; nothing was committed"
                )
            columns[assignment.position] = pa.concat_arrays([batch.column(assignment.position), new]).take(
                take
            )
        return pa.RecordBatch.from_arrays(columns, schema=batch.schema)


# ----------------------------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class _Source:
    path: str
    size_bytes: int
    record_count: int


def _inspect_source(table: Table, path: str) -> _Source:
    """Check a Parquet file to load: readable by the table's FileIO, its columns the table's.

    Columns are matched by Iceberg field id when the file has them, else by name; missing optional
    columns are null; types may be promoted as Iceberg allows (int to long, float to double, ...).

    :raises ConfigurationError: for a missing or unreadable file, a column the table does not have, or a
        missing required column.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = table.metadata.schema()
    try:
        input_file = table.io.new_input(path)
        size = len(input_file)
        with input_file.open() as stream:
            footer = pq.ParquetFile(stream, pre_buffer=False)
            names = list(footer.schema_arrow.names)
            rows = footer.metadata.num_rows
    except (FileNotFoundError, OSError, pa.ArrowInvalid, ValueError) as err:
        raise ConfigurationError(f"cannot read Parquet file {path} to load: {first_line(err)}") from err
    table_names = [column.name for column in schema.columns]
    if extra := [n for n in names if n not in table_names]:
        raise ConfigurationError(
            f"{path} has column(s) {', '.join(extra)} that the table does not have; columns: "
            f"{', '.join(table_names)}"
        )
    if missing := [c.name for c in schema.columns if c.required and c.name not in names]:
        raise ConfigurationError(f"{path} lacks required column(s) {', '.join(missing)}")
    return _Source(path=path, size_bytes=size, record_count=rows)


def _iter_source_batches(table: Table, source: _Source, batch_size: int) -> Iterator[pa.RecordBatch]:
    """Stream a Parquet file to load in the table schema, as if it were a data file of the table."""
    from pyiceberg.exceptions import ResolveError
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.table.name_mapping import create_mapping_from_schema
    from pyiceberg.typedef import Record

    metadata = table.metadata
    schema = metadata.schema()
    _inspect_source(table, source.path)
    as_data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=source.path,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=source.record_count,
        file_size_in_bytes=source.size_bytes,
    )
    try:
        yield from iter_data_file_batches(
            table.io,
            as_data_file,
            table_schema=schema,
            spec=UNPARTITIONED_PARTITION_SPEC,
            name_mapping=metadata.name_mapping() or create_mapping_from_schema(schema),
            format_version=metadata.format_version,
            batch_size=batch_size,
        )
    except ResolveError as err:
        raise ConfigurationError(f"{source.path} does not fit the table schema: {err}") from err


def _check_required(batch: pa.RecordBatch, schema: Schema, where: str) -> None:
    """Fail when a required top-level column holds a null (PyArrow does not check non-nullable fields)."""
    for position, column in enumerate(schema.columns):
        if column.required and batch.column(position).null_count:
            raise ConfigurationError(
                f"{where}: {batch.column(position).null_count} row(s) have null in required column "
                f"{column.name}; nothing was committed"
            )


# ------------------------------------------------------------------------------------------------- plan


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
) -> dict[str, Any]:
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
    :returns: the plan document (``iceberg-exec/cow-plan@1``); its ``tasks`` feed :func:`execute_cow_task`.
    :raises ConfigurationError: for a bad operation, predicate, assignment, source file or isolation level;
        for a format-version 3 table.
    """
    kind = _operation(operation)
    refresh_table(table)
    metadata = table.metadata
    if metadata.format_version >= 3:
        raise ConfigurationError(
            f"format version {metadata.format_version} tables are not supported: PyIceberg 0.12 cannot write "
            "v3 metadata; table left unchanged"
        )
    if task_size_bytes <= 0:
        raise ConfigurationError("task_size_bytes must be > 0")
    schema = metadata.schema()
    predicate = _Predicate(where, schema)
    level = _isolation_level(kind, isolation_level, metadata.properties)
    assignments: dict[str, str] | None = None
    if kind == "update":
        checked = _assignments(schema, set_columns)
        _check_expressions(schema, checked)
        assignments = {a.name: a.expression for a in checked}
    elif set_columns:
        raise ConfigurationError(f"set applies to update only, not to {kind}")
    sources: list[_Source] = []
    if kind == "overwrite":
        if not source_files:
            raise ConfigurationError("an overwrite needs at least one Parquet file to load (--from)")
        if len(set(source_files)) != len(source_files):
            raise ConfigurationError("a Parquet file to load is listed more than once")
        sources = [_inspect_source(table, path) for path in source_files]
    elif source_files:
        raise ConfigurationError(f"files to load apply to overwrite only, not to {kind}")

    check_branch(metadata, branch, _table_name(table))
    snapshot = table.snapshot_by_name(branch)
    common = {
        "table": _table_name(table),
        "branch": branch,
        "operation": kind,
        "where": predicate.text,
        "set": assignments,
        "base_snapshot_id": snapshot.snapshot_id if snapshot is not None else None,
        "schema_id": schema.schema_id,
        "isolation_level": level.value,
        "output_spec_id": metadata.default_spec_id,
    }
    entries: list[dict[str, Any]] = []
    dropped = 0
    if snapshot is not None:
        specs = metadata.specs()
        all_rows_match = predicate.strict_evaluator(metadata)
        scanned_files = scan_data_files(table, snapshot, predicate.unbound)
        # Which live data files each delete file applies to, over the whole table (not only `where`).
        applies_to = (
            delete_targets(scan_data_files(table, snapshot, parse_where(None, schema)))
            if any(f.delete_files for f in scanned_files)
            else {}
        )
        for scanned in scanned_files:
            data_file = scanned.data_file
            whole = kind != "update" and not scanned.delete_files and all_rows_match(data_file)
            dropped += whole
            entries.append(
                {
                    **scanned_to_json(scanned, specs, schema),
                    "removable-delete-files": removable_deletes([scanned], applies_to, specs, schema),
                    "all-rows-match": whole,
                    "_order": (
                        data_file.spec_id,
                        specs[data_file.spec_id].partition_to_path(data_file.partition, schema),
                        data_file.file_path,
                    ),
                }
            )
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
    return envelope(
        COW_PLAN,
        {
            **common,
            "tasks": tasks,
            "candidate_data_files_count": len(entries),
            "dropped_without_reading_count": dropped,
            "source_files_count": len(sources),
        },
    )


def _operation(text: str) -> str:
    kind = str(text).strip().lower()
    if kind not in COW_OPERATIONS:
        raise ConfigurationError(f"unknown operation {text!r}; use one of {', '.join(COW_OPERATIONS)}")
    return kind


def _isolation_level(kind: str, explicit: str | None, properties: Mapping[str, str]) -> IsolationLevel:
    if explicit is not None and str(explicit).strip():
        return IsolationLevel.parse(explicit)
    name = _ISOLATION_PROPERTIES[kind]
    value = properties.get(name, IsolationLevel.SERIALIZABLE.value)
    try:
        return IsolationLevel.parse(value)
    except ConfigurationError as err:
        raise ConfigurationError(f"table property {name}={value!r}: {err}") from err


def _check_expressions(schema: Schema, assignments: Sequence[_Assignment]) -> None:
    from datafusion import SessionContext
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    _Updater(SessionContext(), assignments).check(schema_to_pyarrow(schema, include_field_ids=False))


def _tasks(
    common: Mapping[str, Any],
    entries: list[dict[str, Any]],
    sources: Sequence[_Source],
    task_size_bytes: int,
) -> list[dict[str, Any]]:
    """Pack files into tasks of at most ``task_size_bytes`` to read, in (spec, partition, path) order.

    Files removed without reading cost nothing; files to load go in tasks of their own.
    """
    tasks: list[dict[str, Any]] = []
    current: list[dict[str, Any]] = []
    current_bytes = 0

    def close(data_files: list[dict[str, Any]], source_files: list[dict[str, Any]]) -> None:
        tasks.append(
            envelope(
                COW_TASK,
                {**common, "task_id": len(tasks), "data_files": data_files, "source_files": source_files},
            )
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
    batch: list[dict[str, Any]] = []
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


# ---------------------------------------------------------------------------------------------- execute


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
    removed_deletes: list[dict[str, Any]] = field(default_factory=list)
    applied_deletes: dict[str, dict[str, Any]] = field(default_factory=dict)
    added: list[DataFile] = field(default_factory=list)

    def merge(self, other: _Counts) -> None:
        """Add ``other`` into this one (on one thread: the task's)."""
        for name in _COUNT_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.removed.extend(other.removed)
        self.removed_deletes.extend(other.removed_deletes)
        self.applied_deletes.update(other.applied_deletes)
        self.added.extend(other.added)

    def remove(self, entry: Mapping[str, Any]) -> None:
        """Record the removal of a task entry's data file, and of the delete files only it needed."""
        self.removed.append(dict(entry["data-file"]))
        self.removed_deletes.extend(entry.get("removable-delete-files") or [])
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


def execute_cow_task(table: Table, task: Mapping[str, Any], limits: ResourceLimits) -> dict[str, Any]:
    """Run one copy-on-write task in a bounded execution and return its result document.

    Each data file (see the module docstring) is removed unread, or probed on the predicate's columns and
    then left untouched, removed, or rewritten without its matching rows (``delete``, ``overwrite``) or
    with them updated (``update``); files are rewritten on up to one thread per core while the memory
    limit allows. Rows loaded by ``overwrite`` are checked against the predicate and the required columns
    as they stream. On any failure every file this task wrote is removed.

    :returns: ``iceberg-exec/cow-result@1``: removed and added files as DataFile JSON, counts of rows,
        bytes read and written, peak RSS, spilled bytes.
    :raises ConfigurationError: for a malformed task, a task planned on another schema, an update whose
        values do not fit the table (a null in a required column, say), or loaded rows that do not match
        the predicate.
    :raises DataFileReadError: when an input file is missing or corrupt.
    :raises ResourceLimitError: when the memory pool or the spill disk runs out.
    """
    doc = check_cow_task(task)
    metadata = table.metadata
    if doc["base_snapshot_id"] is not None:
        check_base_snapshot(metadata, doc["base_snapshot_id"])
    schema = metadata.schema()
    if int(doc["schema_id"]) != schema.schema_id:
        raise ConfigurationError(
            f"the schema of {doc['table']} changed since planning (schema id {doc['schema_id']} -> "
            f"{schema.schema_id}); plan again"
        )
    kind = _operation(doc["operation"])
    specs = metadata.specs()
    output_spec_id = int(doc["output_spec_id"])
    if output_spec_id not in specs:
        raise ConfigurationError(f"task output spec {output_spec_id} is not a partition spec of the table")
    entries = list(doc.get("data_files") or [])
    sources = [
        _Source(path=str(s["path"]), size_bytes=int(s["size-in-bytes"]), record_count=int(s["record-count"]))
        for s in doc.get("source_files") or []
    ]
    run = _Run(table, doc, kind, limits)
    with track_resources(limits) as (spill_dir, stats):
        try:
            run.execute(entries, sources, spill_dir)
        except BaseException as err:
            run.abort()
            mapped = resource_error(err)
            if mapped is err:
                raise
            raise mapped from err
    counts = run.counts
    added = [*counts.added, *run.added]
    output_spec = specs[output_spec_id]
    written_bytes = sum(f.file_size_in_bytes for f in added)
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
        written_bytes,
        counts.deleted_rows,
        counts.updated_rows,
        counts.inserted_rows,
        counts.rewritten_rows,
        stats.peak_rss_bytes >> 20,
        stats.spilled_bytes >> 20,
    )
    return envelope(
        COW_RESULT,
        {
            **{key: doc.get(key) for key in _COMMON_KEYS},
            "task_id": doc.get("task_id"),
            "removed_data_files": counts.removed,
            "removed_delete_files": counts.removed_deletes,
            "applied_deletes": counts.applied_deletes,
            "added_data_files": [data_file_to_json(f, output_spec, schema) for f in added],
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
            "written_bytes": written_bytes,
            "peak_rss_bytes": stats.peak_rss_bytes,
            "spilled_bytes": stats.spilled_bytes,
            "elapsed_seconds": round(stats.elapsed_seconds, 3),
        },
    )


_COMMON_KEYS = ("table", "branch", "operation", "where", "set", "base_snapshot_id", "isolation_level")


class _Run:
    """One task's execution: files processed (in parallel where rows stay in place), counts, writers.

    Files whose rows stay in their partition are processed on ``_workers(limits)`` threads, each file
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
        self.specs = metadata.specs()
        self.output_spec = self.specs[int(doc["output_spec_id"])]
        self.predicate = _Predicate(doc["where"], self.schema)
        self.assignments = _assignments(self.schema, doc.get("set")) if kind == "update" else []
        self.locations = load_location_provider(metadata.location, metadata.properties)
        self.target_file_size = int(
            metadata.properties.get(_TARGET_FILE_SIZE_PROPERTY, _DEFAULT_TARGET_FILE_SIZE)
        )
        self.sort_orders = {order.order_id: order for order in metadata.sort_orders}
        self.counts = _Counts()
        self.writers: list[RollingDataFileWriter] = []
        self.added: list[DataFile] = []
        self._updater: _Updater | None = None
        self.spill_dir = ""  # set by execute
        self.set_ids = {a.field_id for a in self.assignments}
        self.moves_partitions = bool(self.set_ids & {f.source_id for f in self.output_spec.fields})

    # -- the task --------------------------------------------------------------------------------------

    def execute(
        self, entries: Sequence[Mapping[str, Any]], sources: Sequence[_Source], spill_dir: str
    ) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.spill_dir = spill_dir
        if self.kind == "update":
            self._updater = _Updater(build_session(self.limits, spill_dir), self.assignments)
        in_place: list[tuple[Mapping[str, Any], ScannedFile]] = []
        to_order: list[Callable[[], Iterator[pa.RecordBatch]]] = []
        ordered = _Counts()  # filled while the ordered stream is consumed, merged once it is written
        for entry in entries:
            scanned = scanned_from_json(entry, self.specs, self.schema)
            if entry.get("all-rows-match"):
                self.counts.merge(self._drop_unread(entry, scanned.data_file))
            elif self._needs_order(scanned.data_file):
                rewrite = self._triage(entry, scanned, ordered)
                if rewrite is not None:
                    to_order.append(rewrite)
            else:
                in_place.append((entry, scanned))

        workers = min(_workers(self.limits), len(in_place))
        if any(has_equality_deletes(scanned) for _, scanned in in_place):
            workers = 1  # each equality-delete anti-join takes its own share of the memory limit
        if workers <= 1:
            for item in in_place:
                self.counts.merge(self._in_place(*item))
        else:
            pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="iceberg-exec-cow")
            try:
                for outcome in pool.map(lambda item: self._in_place(*item), in_place):
                    self.counts.merge(outcome)
            finally:
                pool.shutdown(wait=True, cancel_futures=True)

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
        return outcome

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
        for batch in self._read(scanned, self.schema):
            mask = self.predicate.matches(batch)
            matched = int(pc.sum(mask).as_py() or 0)
            matched_total += matched
            seen += batch.num_rows
            if self.kind == "update":
                if self._updater is None:  # pragma: no cover - execute sets it for updates
                    raise RuntimeError("no updater")
                out = self._updater.apply(batch, mask, matched)
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

    def _read(self, scanned: ScannedFile, projection: Schema) -> Iterator[pa.RecordBatch]:
        """The rows of a data file: its live rows, all columns, when it has delete files."""
        return _live_batches(self.table, scanned, projection, self.limits, self.spill_dir)

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

    def _load(self, source: _Source) -> Iterator[pa.RecordBatch]:
        """The rows of a Parquet file to load, each checked against the predicate and the schema."""
        import pyarrow.compute as pc

        self.counts.read_bytes += source.size_bytes
        for batch in _iter_source_batches(self.table, source, self.limits.batch_size):
            _check_required(batch, self.schema, f"overwrite from {source.path}")
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
            yield batch

    # -- writing ---------------------------------------------------------------------------------------

    def _write(self, batches: Iterator[pa.RecordBatch], *, sort_order_id: int | None) -> list[DataFile]:
        writer = RollingDataFileWriter(
            io=self.table.io,
            location_provider=self.locations,
            schema=self.schema,
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
        return writer.close()


def _workers(limits: ResourceLimits) -> int:
    """Files rewritten at once: one per core, as long as each gets four writer buffers of the limit."""
    return max(
        1, min(limits.target_partitions, limits.memory_limit_bytes // (4 * limits.writer_buffer_bytes))
    )


# ----------------------------------------------------------------------------------------------- commit


def commit_cow_rewrite(
    table: Table, results: Sequence[Mapping[str, Any]], *, commit_id: str
) -> dict[str, Any]:
    """Commit the results of one plan's tasks as one snapshot, idempotently by ``commit_id``.

    The snapshot is ``overwrite`` (``delete`` when nothing is added, ``append`` when nothing is removed),
    validated from the plan's base snapshot with the predicate as the conflict-detection filter and the
    plan's isolation level (:func:`~.commit.snapshots.commit_overwrite`). When
    nothing matched, nothing is committed. When validation fails, the new files are deleted.

    :returns: ``iceberg-exec/cow-commit-result@1``.
    :raises ConfigurationError: for results of different plans.
    :raises CommitValidationError: when a concurrent commit conflicts (re-plan).
    :raises CommitConflictError: when the catalog kept rejecting the commit (retry later).
    :raises CommitStateUnknownError: when the catalog's answer is unknown.
    """
    docs = [check_cow_result(r) for r in results]
    summary: dict[str, Any] = {
        "table": _table_name(table),
        "operation": None,
        "snapshot_operation": None,
        "commit_id": commit_id,
        "snapshot_ids": [],
        "already_committed": False,
        "isolation_level": None,
        "deleted_data_files_count": 0,
        "added_data_files_count": 0,
        "removed_delete_files_count": 0,
        "untouched_data_files_count": sum(int(d.get("untouched_data_files_count", 0)) for d in docs),
        "dropped_without_reading_count": sum(int(d.get("dropped_without_reading_count", 0)) for d in docs),
        **{key: sum(int(d.get(key, 0)) for d in docs) for key in _ROW_AND_BYTE_KEYS},
        "peak_rss_bytes": max((int(d.get("peak_rss_bytes", 0)) for d in docs), default=0),
        "spilled_bytes": max((int(d.get("spilled_bytes", 0)) for d in docs), default=0),
    }
    if not docs:
        log.info("nothing to commit for %s", summary["table"])
        return envelope(COW_COMMIT_RESULT, summary)
    plans = {tuple(str(d.get(key)) for key in _COMMON_KEYS) for d in docs}
    if len(plans) != 1:
        raise ConfigurationError("results come from different plans; commit each plan alone")
    first = docs[0]
    if first["table"] != summary["table"]:
        raise ConfigurationError(f"the results are for table {first['table']}, not {summary['table']}")
    if len({d["task_id"] for d in docs}) != len(docs):
        raise DataFileCodecError("the results list a task more than once; commit each task's result once")
    summary["operation"] = first["operation"]
    summary["isolation_level"] = first["isolation_level"]
    refresh_table(table)
    branch = str(first["branch"])
    check_branch(table.metadata, branch, summary["table"])
    schema = table.metadata.schema()
    specs = table.metadata.specs()
    deleted = [data_file_from_json(f, specs, schema) for d in docs for f in d["removed_data_files"]]
    added = [data_file_from_json(f, specs, schema) for d in docs for f in d["added_data_files"]]
    if len({f.file_path for f in deleted}) != len(deleted):
        raise ConfigurationError("results remove the same data file twice; commit each plan once")
    if len({f.file_path for f in added}) != len(added):
        raise DataFileCodecError("the results add the same file twice; commit each plan once")
    summary["deleted_data_files_count"] = len(deleted)
    summary["added_data_files_count"] = len(added)
    if not deleted and not added:
        log.info("no row of %s matches %s: nothing to commit", summary["table"], first["where"])
        return envelope(COW_COMMIT_RESULT, summary)
    base = first.get("base_snapshot_id")
    predicate = parse_where(str(first["where"]), schema)
    if find_commit(table.metadata, branch, commit_id) is None:
        # What the results claim is proven first; a bad claim refuses and deletes nothing.
        _verify_results(table, docs, BaseFiles(table, base, predicate), specs, schema)
    try:
        # The deletes to drop are decided by the commit, on the branch head it commits on (on every
        # retry): those that applied to the removed files and, after the commit, apply to no live data
        # file (the tasks' removed_delete_files, their DVs and file-scoped position deletes, are among
        # them; so is a partition-scoped or equality delete whose files all go). One that a concurrent
        # commit made apply to another live file again is kept, never removed with its rows.
        outcome = commit_overwrite(
            table,
            base_snapshot_id=int(base) if base is not None else None,
            deleted_data_files=deleted,
            added_data_files=added,
            dangling_deletes=DanglingDeletes.REWRITTEN,
            conflict_detection_filter=predicate,
            isolation_level=str(first["isolation_level"]),
            commit_id=commit_id,
            branch=branch,
            snapshot_properties={"iceberg-exec.operation": str(first["operation"])},
        )
    except CommitValidationError:
        # A validation failure repeats on any retry: these files can never be committed. Only those
        # the table does not reference go (the same results may have landed under another commit id).
        delete_unreferenced(table, [f.file_path for f in added], what=f"uncommitted output of {commit_id}")
        raise
    summary["snapshot_ids"] = [outcome.snapshot_id]
    summary["removed_delete_files_count"] = int(outcome.summary.get("removed-delete-files", "0"))
    summary["snapshot_operation"] = outcome.summary.get("operation")
    summary["already_committed"] = outcome.already_committed
    log.info(
        "%s %s on %s: snapshot %s (%s): %d data file(s) removed, %d added; rows deleted %d, updated %d, "
        "inserted %d",
        "Found" if outcome.already_committed else "Committed",
        first["operation"],
        summary["table"],
        outcome.snapshot_id,
        summary["snapshot_operation"],
        len(deleted),
        len(added),
        summary["deleted_rows"],
        summary["updated_rows"],
        summary["inserted_rows"],
    )
    return envelope(COW_COMMIT_RESULT, summary)


def _live_batches(
    table: Table, scanned: ScannedFile, projection: Schema, limits: ResourceLimits, spill_dir: str
) -> Iterator[pa.RecordBatch]:
    """The live rows of one data file: ``projection`` of it, or all columns when it has delete files."""
    metadata = table.metadata
    if scanned.delete_files:
        return iter_live_group_batches(
            table.io, metadata, [scanned], limits=limits, spill_dir=spill_dir, stats=DeleteStats()
        )
    data_file = scanned.data_file
    return iter_data_file_batches(
        table.io,
        data_file,
        table_schema=projection,
        spec=metadata.specs()[data_file.spec_id],
        name_mapping=metadata.name_mapping(),
        format_version=metadata.format_version,
        batch_size=read_batch_rows(data_file, limits.batch_size),
    )


class _MatchCounter:
    """Counts, from the removed files themselves, their live rows and those matching the predicate, so
    that a result cannot say which rows the predicate removed; one per commit (the predicate is the plan's).

    A file without delete files whose metrics prove that every row matches is not read.
    """

    def __init__(self, table: Table, where: str, limits: ResourceLimits, spill_dir: str) -> None:
        from pyiceberg.schema import prune_columns

        schema = table.metadata.schema()
        self.table, self.limits, self.spill_dir = table, limits, spill_dir
        self.predicate = _Predicate(where, schema)
        self.every_row_matches = self.predicate.strict_evaluator(table.metadata)
        field_ids = self.predicate.field_ids
        self.projection = prune_columns(schema, field_ids, select_full_types=False) if field_ids else schema

    def count(self, scanned: ScannedFile) -> tuple[int, int]:
        """``(live rows, matching live rows)`` of one data file."""
        import pyarrow.compute as pc

        if not scanned.delete_files and self.every_row_matches(scanned.data_file):
            return scanned.data_file.record_count, scanned.data_file.record_count
        live = matched = 0
        batches = _live_batches(self.table, scanned, self.projection, self.limits, self.spill_dir)
        with closing(batches):  # type: ignore[type-var]  # a generator: closes the file now
            for batch in batches:
                live += batch.num_rows
                matched += int(pc.sum(self.predicate.matches(batch)).as_py() or 0)
        return live, matched


def _prove_matches(doc: Mapping[str, Any], base_files: BaseFiles, counter: _MatchCounter) -> None:
    """Refuse a result whose row counts differ from what its removed files hold (:class:`_MatchCounter`).

    :raises DataFileCodecError: naming the counts that differ.
    """
    stored = live = matched = 0
    for removed in doc["removed_data_files"]:
        scanned = base_files.live[str(removed["file-path"])]
        stored += scanned.data_file.record_count
        file_live, file_matched = counter.count(scanned)
        live += file_live
        matched += file_matched
    by_predicate = "updated_rows" if doc["operation"] == "update" else "deleted_rows"
    claimed = (int(doc[by_predicate]), int(doc["rewritten_rows"]), int(doc["delete_file_rows"]))
    if claimed != (matched, live - matched, stored - live):
        raise DataFileCodecError(
            f"task {doc['task_id']}: its removed files hold {matched} matching and {live - matched} other "
            f"live rows ({stored - live} removed by delete files), but the result says {by_predicate} "
            f"{claimed[0]}, rewritten_rows {claimed[1]}, delete_file_rows {claimed[2]}; nothing committed"
        )


def _verify_results(
    table: Table,
    docs: Sequence[Mapping[str, Any]],
    base_files: BaseFiles,
    specs: Mapping[int, PartitionSpec],
    schema: Schema,
) -> None:
    """Prove each task result against the base snapshot and the storage, its rows included."""
    limits = ResourceLimits()
    with track_resources(limits) as (spill_dir, _stats):
        counter = _MatchCounter(table, str(docs[0]["where"]), limits, spill_dir)
        for doc in docs:
            _verify_result(table, doc, base_files, counter, specs, schema)


def _verify_result(
    table: Table,
    doc: Mapping[str, Any],
    base_files: BaseFiles,
    counter: _MatchCounter,
    specs: Mapping[int, PartitionSpec],
    schema: Schema,
) -> None:
    """One result: its added files, its removed files and deletes, its rows (see above)."""
    removed = [data_file_from_json(f, specs, schema) for f in doc["removed_data_files"]]
    added = [data_file_from_json(f, specs, schema) for f in doc["added_data_files"]]
    verify_added_files(table, added)
    check_rows(
        base_files.check_removed(removed, doc["applied_deletes"]),
        kept=sum(f.record_count for f in added) - int(doc["inserted_rows"]),
        by_deletes=int(doc["delete_file_rows"]),
        by_operation=int(doc["deleted_rows"]),
        what=f"task {doc['task_id']}",
    )
    _prove_matches(doc, base_files, counter)


_ROW_AND_BYTE_KEYS = (
    "deleted_rows",
    "updated_rows",
    "inserted_rows",
    "rewritten_rows",
    "read_bytes",
    "written_bytes",
)


def cow_rewrite(
    table: Table,
    *,
    operation: str,
    where: str,
    set_columns: Mapping[str, str] | None = None,
    source_files: Sequence[str] = (),
    branch: str = "main",
    isolation_level: str | None = None,
    limits: ResourceLimits | None = None,
    commit_id: str | None = None,
) -> dict[str, Any]:
    """Plan, run every task and commit a copy-on-write ``delete``, ``update`` or ``overwrite`` in one call.

    Tasks run one after another, each bounded by ``limits``. When anything fails before the catalog
    accepted the commit, every file written is removed and the table is unchanged.

    >>> # cow_rewrite(table, operation="delete", where="user_id = 42", limits=ResourceLimits())

    :returns: the commit result (``iceberg-exec/cow-commit-result@1``) with a ``plan`` summary.
    :raises ConfigurationError: for bad input (nothing was changed).
    """
    limits = limits or ResourceLimits()
    plan = plan_cow_rewrite(
        table,
        operation=operation,
        where=where,
        set_columns=set_columns,
        source_files=source_files,
        branch=branch,
        isolation_level=isolation_level,
    )
    results: list[dict[str, Any]] = []
    try:
        for number, task in enumerate(plan["tasks"], start=1):
            log.info("running %s task %d of %d", plan["operation"], number, len(plan["tasks"]))
            results.append(execute_cow_task(table, task, limits))
        outcome = commit_cow_rewrite(table, results, commit_id=commit_id or uuid.uuid4().hex)
    except CommitStateUnknownError:
        raise  # the files may be live now: never delete them
    except BaseException:
        # Nothing this call wrote can be committed any more; what the table does not reference goes.
        written = [uri for result in results for uri in uris_of(result["added_data_files"])]
        delete_unreferenced(table, written, what=f"output of a failed {operation}")
        raise
    outcome["plan"] = {
        "base_snapshot_id": plan["base_snapshot_id"],
        "tasks": len(plan["tasks"]),
        "candidate_data_files_count": plan["candidate_data_files_count"],
        "dropped_without_reading_count": plan["dropped_without_reading_count"],
    }
    return outcome


def _table_name(table: Table) -> str:
    return ".".join(table.name())

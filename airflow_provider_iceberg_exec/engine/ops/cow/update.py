"""An update's ``SET`` assignments: checked against the schema at planning, evaluated by DataFusion over
the matching rows of each batch while a task rewrites a file.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, IcebergExecError, first_line
from airflow_provider_iceberg_exec.engine.io.session import resource_error

if TYPE_CHECKING:
    import pyarrow as pa
    from datafusion import SessionContext
    from pyiceberg.schema import Schema

__all__ = ["Assignment", "Updater", "check_expressions", "parse_assignments"]

_SET_ALIAS = "__iceberg_exec_set_{}"


@dataclass(frozen=True)
class Assignment:
    """One ``column = expression`` of an update, with what the rewrite needs of its column."""

    position: int
    name: str
    expression: str
    required: bool
    field_id: int


def parse_assignments(schema: Schema, set_columns: Mapping[str, str] | None) -> list[Assignment]:
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
            Assignment(
                position=names.index(name),
                name=name,
                expression=expression.strip(),
                required=table_field.required,
                field_id=table_field.field_id,
            )
        )
    return out


class Updater:
    """Evaluate the ``SET`` expressions with DataFusion over the matching rows of one batch at a time.

    Each batch's matching rows become an anonymous DataFusion frame (``read_batch``) from which the
    expressions are selected; the results are cast to the table's column types (a value that does not
    fit, or a null for a required column, is a :class:`ConfigurationError`) and put back in place, so
    the rows keep their order.
    """

    def __init__(self, ctx: SessionContext, assignments: Sequence[Assignment]) -> None:
        self._ctx = ctx
        self._lock = threading.Lock()  # one batch at a time through the shared session
        self.parse_assignments = list(assignments)
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
        for i, assignment in enumerate(self.parse_assignments):
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
        return "set " + ", ".join(f"{a.name} = {a.expression}" for a in self.parse_assignments)

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
        for i, assignment in enumerate(self.parse_assignments):
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


def check_expressions(schema: Schema, assignments: Sequence[Assignment]) -> None:
    """Plan the assignments against an empty batch of the table schema (see :meth:`Updater.check`)."""
    from datafusion import SessionContext
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    Updater(SessionContext(), assignments).check(schema_to_pyarrow(schema, include_field_ids=False))

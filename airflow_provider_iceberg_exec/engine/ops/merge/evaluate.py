"""MERGE's clauses evaluated over batches: which clause each row takes, and the rows it writes.

A batch here is "combined": the target row as struct column ``t``, the source row as ``s`` (NULL where
a side is absent) and the row's kind (:data:`~.clauses.MATCHED`, ...), so that clause SQL reads
``t.col`` and ``s.col`` as Spark's does.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.ops.merge.clauses import (
    CHOICE,
    KIND,
    MATCHED,
    NOT_MATCHED_BY_SOURCE,
    MergeClauses,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa

__all__ = ["Evaluator", "check_clauses", "combine"]


def check_clauses(clauses: MergeClauses, schema: Any, source_schema: pa.Schema) -> None:
    """Fail now when a clause's condition or value does not evaluate over the target and source rows."""
    Evaluator(clauses, schema, source_schema).check()


def combine(
    batch: pa.RecordBatch,
    positions: npt.NDArray[np.int64],
    rows: list[pa.RecordBatch],
    row_positions: list[npt.NDArray[np.int64]],
    source_type: pa.DataType,
) -> pa.RecordBatch:
    """The target rows of ``batch`` beside their matched source rows: columns ``t``, ``s`` and the kind."""
    import numpy as np
    import pyarrow as pa

    n = batch.num_rows
    target = pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema))
    if not rows:
        source = pa.nulls(n, source_type)
        kind = np.full(n, NOT_MATCHED_BY_SOURCE, dtype=np.int8)
    else:
        matched = pa.Table.from_batches(rows).combine_chunks()
        at = np.searchsorted(positions, np.concatenate(row_positions))
        index = np.full(n, -1, dtype=np.int64)
        index[at] = np.arange(len(at))
        taken = matched.take(pa.array(index, mask=index < 0))
        source = pa.StructArray.from_arrays(
            [c.combine_chunks().cast(f.type) for c, f in zip(taken.columns, source_type, strict=True)],
            fields=list(source_type),
            mask=pa.array(index < 0),
        )
        kind = np.where(index >= 0, MATCHED, NOT_MATCHED_BY_SOURCE).astype(np.int8)
    return pa.RecordBatch.from_arrays([target, source, pa.array(kind)], names=["t", "s", KIND])


class Evaluator:
    """The clauses over combined batches: which clause each row takes, and the rows it writes.

    Clauses without conditions are decided by the row's kind alone; ``UPDATE SET *`` and ``INSERT *``
    take the source row's columns as they are; anything else is one DataFusion query per batch.
    """

    def __init__(self, clauses: MergeClauses, schema: Any, source_schema: pa.Schema) -> None:
        import pyarrow as pa

        self.clauses = clauses
        self.arrow_schema = schema.as_arrow()
        self.target_type = pa.struct(list(self.arrow_schema))
        self.schema = schema
        self.deletes = clauses.numbers("delete")
        self.update_numbers = clauses.numbers("update")
        self.insert_numbers = clauses.numbers("insert")
        self._local = threading.local()  # a session per thread: files are evaluated on several
        self.source_type = pa.struct(list(source_schema))
        self._by_kind = self._unconditional()

    def check(self) -> None:
        """Plan every clause's SQL once over no rows, so that a bad expression fails before any work.

        :raises ConfigurationError: naming DataFusion's complaint.
        """
        import pyarrow as pa

        empty = pa.RecordBatch.from_arrays(
            [pa.array([], self.target_type), pa.array([], self.source_type), pa.array([], pa.int8())],
            names=["t", "s", KIND],
        )
        self._query(empty, self.clauses.choice_sql("m"))
        numbers = [*self.update_numbers, *self.insert_numbers]
        if numbers:
            with_choice = empty.append_column(CHOICE, pa.array([], pa.int64()))
            self._query(with_choice, self.clauses.output_sql("m", numbers))

    def _unconditional(self) -> dict[int, int] | None:
        """The clause number each kind takes when no clause has a condition, else ``None``."""
        if any(c.condition for c in self.clauses.all):
            return None
        first: dict[int, int] = {}
        for number, clause in enumerate(self.clauses.all, start=1):
            first.setdefault(clause.kind, number)
        return first

    def choose(self, combined: pa.RecordBatch) -> npt.NDArray[np.int64]:
        import numpy as np

        kinds = combined.column(KIND).to_numpy()
        if self._by_kind is not None:
            choice = np.zeros(len(kinds), dtype=np.int64)
            for kind, number in self._by_kind.items():
                choice[kinds == kind] = number
            return choice
        table = self._query(combined, self.clauses.choice_sql("m"))
        numbers: npt.NDArray[np.int64] = table.column(0).to_numpy().astype(np.int64)
        return numbers

    def changes(self, choice: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        import numpy as np

        changed: npt.NDArray[np.bool_] = np.isin(choice, [*self.deletes, *self.update_numbers])
        return changed

    def updates(self, combined: pa.RecordBatch, choice: npt.NDArray[np.int64]) -> pa.RecordBatch | None:
        return self._rows(combined, choice, self.update_numbers)

    def inserts(self, combined: pa.RecordBatch, choice: npt.NDArray[np.int64]) -> pa.RecordBatch | None:
        return self._rows(combined, choice, self.insert_numbers)

    def _rows(
        self, combined: pa.RecordBatch, choice: npt.NDArray[np.int64], numbers: list[int]
    ) -> pa.RecordBatch | None:
        import numpy as np
        import pyarrow as pa

        from airflow_provider_iceberg_exec.engine.io.write import check_required, conform_batch

        taken = np.isin(choice, numbers)
        if not numbers or not taken.any():
            return None
        chosen = {int(n) for n in np.unique(choice[taken])}
        if all(self.clauses.copies_source(self.clauses.all[n - 1]) for n in chosen):
            source = combined.column("s").filter(pa.array(taken))
            out = pa.RecordBatch.from_arrays(
                [source.field(c) for c in self.arrow_schema.names], schema=self.arrow_schema
            )
        else:
            with_choice = combined.append_column(CHOICE, pa.array(choice))
            table = self._query(with_choice, self.clauses.output_sql("m", sorted(chosen)))
            out = conform_batch(_one_batch(table, self.arrow_schema), self.arrow_schema)
        check_required(out, self.schema, "merge")
        return out

    def _session(self) -> Any:
        from datafusion import SessionConfig, SessionContext

        ctx = getattr(self._local, "ctx", None)
        if ctx is None:
            # One partition: the clause numbers must come back in the rows' order.
            ctx = self._local.ctx = SessionContext(SessionConfig().with_target_partitions(1))
        return ctx

    def _query(self, batch: pa.RecordBatch, sql: str) -> pa.Table:
        import pyarrow as pa

        from airflow_provider_iceberg_exec.engine.errors import first_line

        ctx = self._session()
        ctx.register_record_batches("m", [[batch]])
        try:
            frame = ctx.sql(sql)
            batches = frame.collect()
            # The schema of what came back (nullability may differ from the plan's); the plan's for none.
            return pa.Table.from_batches(batches) if batches else frame.schema().empty_table()
        except Exception as err:  # DataFusion's planning and execution errors
            raise ConfigurationError(
                f"cannot evaluate the merge clauses: {first_line(err)}; qualify columns with t. (target) or "
                "s. (source)"
            ) from err
        finally:
            ctx.deregister_table("m")


def _one_batch(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    import pyarrow as pa

    if table.num_rows == 0:
        return pa.RecordBatch.from_pylist([], schema=schema)
    columns = [table.column(i).combine_chunks() for i in range(table.num_columns)]
    arrays = [c.cast(f.type) if c.type != f.type else c for c, f in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)

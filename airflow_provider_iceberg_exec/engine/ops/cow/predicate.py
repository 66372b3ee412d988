"""Which rows a copy-on-write predicate matches, per batch with SQL's nulls, and which files it provably
matches in full, from their partition or column metrics.

The predicate is PyIceberg's row-filter syntax; ``not`` is pushed down to the comparisons as PyIceberg
does, so a comparison with null (unknown) leaves the row in place, and NaN compares as IEEE 754.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyiceberg.expressions.visitors import BoundBooleanExpressionVisitor, bind, rewrite_not, visit

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.io.pyiceberg_internals import strict_metrics_evaluator
from airflow_provider_iceberg_exec.engine.io.write import column_of
from airflow_provider_iceberg_exec.engine.meta.scan import parse_where

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.expressions import BooleanExpression, BoundTerm
    from pyiceberg.expressions.literals import Literal
    from pyiceberg.manifest import DataFile
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.typedef import Record

__all__ = ["Predicate"]

log = logging.getLogger(__name__)


class Predicate:
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
        from pyiceberg.expressions.visitors import expression_evaluator, strict_projection
        from pyiceberg.schema import Schema

        schema = metadata.schema()
        specs = metadata.specs()
        metrics_imply_match = strict_metrics_evaluator(schema, self.unbound, case_sensitive=True)
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
            return metrics_imply_match(data_file)

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

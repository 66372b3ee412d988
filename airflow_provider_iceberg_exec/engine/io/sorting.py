"""Sort orders: parsing Spark's ``sort_order`` text, reading a table's order, and matching the two.

An order is a tuple of :class:`SortKey`. Keys on a transform of a column (``day(ts)``, ``bucket(16, id)``)
are sorted on a hidden column computed with PyIceberg's transform, so the rows really follow the
table's order; only then are output files stamped with that order's id.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, IcebergExecError
from airflow_provider_iceberg_exec.engine.io.merge_sort import SortStats, sorted_lanes
from airflow_provider_iceberg_exec.engine.io.zorder import (
    ZOrder,
    zorder_columns,
    zorder_restorable,
    zorder_values,
    zorder_width,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table.sorting import SortOrder
    from pyiceberg.transforms import Transform

__all__ = ["AnyKey", "SortKey", "ZOrder", "match_table_sort_order", "parse_sort_order", "table_sort_keys"]

_KEY_RE = re.compile(
    r"^\s*(?P<expr>.+?)(?:\s+(?P<dir>ASC|DESC))?(?:\s+NULLS\s+(?P<nulls>FIRST|LAST))?\s*$", re.IGNORECASE
)
_ZORDER_RE = re.compile(r"^\s*zorder\s*\((?P<cols>[^()]*)\)\s*$", re.IGNORECASE)
_TRANSFORM_RE = re.compile(r"^(?P<name>\w+)\((?:(?P<arg>\d+)\s*,\s*)?(?P<col>[^()]+)\)$")


@dataclass(frozen=True)
class SortKey:
    """One sort key: a column (dotted path for nested fields), a transform, a direction, a null order."""

    column: str
    source_id: int
    transform: str  # "identity", "day", "bucket[16]", ... (PyIceberg's str of the transform)
    ascending: bool = True
    nulls_first: bool = True

    def to_text(self) -> str:
        """The key in Spark's syntax.

        >>> SortKey("id", 1, "identity", ascending=False, nulls_first=False).to_text()
        'id DESC NULLS LAST'
        """
        expr = self.column if self.transform == "identity" else _transform_text(self.transform, self.column)
        return f"{expr} {'ASC' if self.ascending else 'DESC'} NULLS {'FIRST' if self.nulls_first else 'LAST'}"


#: a key of a sort: a column (or a transform of one), or a z-order of several
AnyKey = SortKey | ZOrder


def _transform_text(transform: str, column: str) -> str:
    match = re.match(r"^(\w+)\[(\d+)\]$", transform)
    if match:
        return f"{match.group(1)}({match.group(2)}, {column})"
    return f"{transform}({column})"


def parse_sort_order(text: str, schema: Schema) -> tuple[AnyKey, ...]:
    """Parse ``"col ASC NULLS LAST, day(ts) DESC, ..."`` against ``schema``.

    Defaults follow Iceberg: ASC means NULLS FIRST, DESC means NULLS LAST.

    ``"zorder(c1, c2)"`` is Spark's z-order (:mod:`.zorder`): one key, on its own.

    :raises ConfigurationError: for an empty order, an unknown column or transform.
    """
    from pyiceberg.transforms import UnknownTransform, parse_transform

    zorder = _parse_zorder(text, schema)
    if zorder is not None:
        return (zorder,)
    keys = []
    for part in _split_top_level(text):
        match = _KEY_RE.match(part)
        if not match or not match.group("expr").strip():
            raise ConfigurationError(
                f"cannot parse sort key {part!r}; expected 'column [ASC|DESC] [NULLS FIRST|LAST]'"
            )
        expr = match.group("expr").strip()
        ascending = (match.group("dir") or "ASC").upper() == "ASC"
        nulls = match.group("nulls")
        nulls_first = ascending if nulls is None else nulls.upper() == "FIRST"
        transform_match = _TRANSFORM_RE.match(expr)
        if transform_match:
            column = transform_match.group("col").strip()
            arg = transform_match.group("arg")
            name = transform_match.group("name").lower()
            transform_text = f"{name}[{arg}]" if arg else name
        else:
            column, transform_text = expr, "identity"
        try:
            field = schema.find_field(column, case_sensitive=True)
        except ValueError:
            raise ConfigurationError(f"sort column {column!r} is not in the table schema") from None
        try:
            transform = parse_transform(transform_text)
        except ValueError:
            raise ConfigurationError(f"unknown transform in sort key {part.strip()!r}") from None
        # parse_transform returns an UnknownTransform for names it does not know instead of raising.
        if isinstance(transform, UnknownTransform):
            raise ConfigurationError(f"unknown transform in sort key {part.strip()!r}")
        if not transform.can_transform(field.field_type):
            raise ConfigurationError(
                f"cannot apply {transform} to column {column!r} of type {field.field_type}"
            )
        keys.append(SortKey(column, field.field_id, str(transform), ascending, nulls_first))
    if not keys:
        raise ConfigurationError("the sort order is empty; give at least one column")
    return tuple(keys)


def _parse_zorder(text: str, schema: Schema) -> ZOrder | None:
    match = _ZORDER_RE.match(text)
    if match:
        return ZOrder.parse(match.group("cols"), schema)
    if "zorder" in text.lower():
        raise ConfigurationError("a z-order is a sort order of its own: 'zorder(c1, c2)', with no other keys")
    return None


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p.strip()] if "".join(parts).strip() else []


def table_sort_keys(order: SortOrder, schema: Schema) -> tuple[SortKey, ...]:
    """The keys of a table sort order."""
    from pyiceberg.table.sorting import NullOrder, SortDirection

    keys = []
    for field in order.fields:
        column = schema.find_column_name(field.source_id)
        if column is None:
            raise ConfigurationError(f"the table sort order uses dropped column id {field.source_id}")
        keys.append(
            SortKey(
                column,
                field.source_id,
                str(field.transform),
                field.direction == SortDirection.ASC,
                field.null_order == NullOrder.NULLS_FIRST,
            )
        )
    return tuple(keys)


def match_table_sort_order(
    keys: tuple[AnyKey, ...], orders: dict[int, SortOrder], schema: Schema
) -> int | None:
    """The id of the table order that ``keys`` are exactly, or None (Java stamps 0 = unsorted then;
    a z-order is never a table order)."""
    for order_id, order in sorted(orders.items()):
        if order.is_unsorted:
            continue
        if table_sort_keys(order, schema) == keys:
            return order_id
    return None


def transform_of(key: SortKey) -> Transform[object, object]:
    """The PyIceberg transform of ``key``."""
    from pyiceberg.transforms import parse_transform

    return parse_transform(key.transform)


#: hidden columns of the staged rows: partition values and transformed sort keys
_HIDDEN_PREFIX = "__iceberg_exec_"


def sort_for_output(
    batches: Iterator[pa.RecordBatch],
    keys: Sequence[AnyKey],
    spec: PartitionSpec,
    schema: Schema,
    limits: ResourceLimits,
    spill_dir: str,
) -> Iterator[pa.RecordBatch]:
    """Sort rows by the output partition, then by ``keys``, under the memory limit: one stream
    (:func:`sorted_lanes_for_output` with one lane)."""
    with sorted_lanes_for_output(batches, keys, spec, schema, limits, spill_dir, lanes=1) as streams:
        for stream in streams:
            yield from stream


@contextlib.contextmanager
def sorted_lanes_for_output(
    batches: Iterator[pa.RecordBatch],
    keys: Sequence[AnyKey],
    spec: PartitionSpec,
    schema: Schema,
    limits: ResourceLimits,
    spill_dir: str,
    *,
    lanes: int,
    stats: SortStats | None = None,
    expected_rows: int = 0,
) -> Iterator[list[Iterator[pa.RecordBatch]]]:
    """Sort rows by the output partition, then by ``keys``, under the memory limit, as up to ``lanes``
    streams of disjoint key ranges in key order (:func:`.merge_sort.sorted_lanes`), each to be consumed
    on a thread of its own.

    An external merge sort (:mod:`.merge_sort`): runs of a sixteenth of the limit sorted in memory and
    spilled under ``spill_dir`` as sorted files cut into fine key ranges, merged in memory a few fine ranges
    at a time (by DataFusion where a key is too common). Transformed keys become hidden
    columns, and a z-order of longs or timestamps replaces its columns with their z-value (they come back
    from it after the sort); both are computed on the sorting threads, and the restore runs on a thread of
    its own per lane.
    """
    order, computed, restored = _sort_columns(keys, spec, schema)
    stager = _Stager(computed, restored)
    with sorted_lanes(
        batches,
        order,
        limits,
        spill_dir,
        prepare=stager.prepare,
        finish=stager.finish,
        lanes=lanes,
        stats=stats,
        expected_rows=expected_rows,
    ) as streams:
        yield streams
    stager.check.verify()


class _Stager:
    """The rows as sorted (hidden columns added, z-order columns replaced by their z-value) and back.

    :meth:`prepare` runs on two sorting threads at once; :meth:`finish` on a thread of its own per lane.
    """

    def __init__(self, computed: list[tuple[list[str], Any]], restored: list[_Restored]) -> None:
        self.computed = computed
        self.restored = restored
        self.dropped = {column for r in restored for column in r.columns}
        self.check = _RestoreCheck(self.dropped)
        self.names: list[str] = []
        self.types: dict[str, pa.DataType] = {}
        self._schema: pa.Schema | None = None
        self._lock = threading.Lock()

    def prepare(self, run: list[pa.RecordBatch]) -> pa.Table:
        """One run's batches as they are sorted, in one schema."""
        import pyarrow as pa

        with self._lock:
            if not self.names:
                self.names.extend(run[0].schema.names)
                self.types.update({f.name: f.type for f in run[0].schema})
            for batch in run:
                for column in self.dropped:
                    self.check.staged[column].add(batch.column(column))
        kept = [name for name in self.names if name not in self.dropped]
        hidden = [name for names, _fn in self.computed for name in names]
        staged_batches = []
        for batch in run:
            staged = pa.RecordBatch.from_arrays(
                [
                    *(batch.column(name) for name in kept),
                    *(a for _names, fn in self.computed for a in fn(batch)),
                ],
                names=[*kept, *hidden],
            )
            # Files of one table project to string or large_string as each was written: one schema.
            with self._lock:
                if self._schema is None:
                    self._schema = staged.schema
            if not staged.schema.equals(self._schema):
                staged = staged.cast(self._schema)
            staged_batches.append(staged)
        return pa.Table.from_batches(staged_batches)

    def finish(self, rows: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The sorted rows' own columns, the z-order columns got back from their z-values."""
        for sorted_batch in _sorted_rows(rows, self.names, self.types, self.restored):
            if self.dropped:
                with self._lock:  # one finish per lane, at once
                    for column in self.dropped:
                        self.check.restored[column].add(sorted_batch.column(column))
            yield sorted_batch


class _Digest:
    """An order-independent digest of int64-like arrays: count, wrapping sum and xor of the values."""

    def __init__(self) -> None:
        self.count = self.total = self.xor = 0

    def add(self, array: pa.Array) -> None:
        import numpy as np
        import pyarrow as pa

        values = array.drop_null().view(pa.int64()).to_numpy().view(np.uint64)
        self.count += len(values)
        self.total = (self.total + int(values.sum(dtype=np.uint64))) % (1 << 64)
        self.xor ^= int(np.bitwise_xor.reduce(values)) if len(values) else 0

    def key(self) -> tuple[int, int, int]:
        return self.count, self.total, self.xor


class _RestoreCheck:
    """The z-order columns staged only as their z-values are the table's data: each one's digest taken
    before staging and after the restore must agree, or the task fails (nothing is committed) instead
    of writing values that changed on the way through staging, sort and spill."""

    def __init__(self, columns: set[str]) -> None:
        self.staged = {column: _Digest() for column in columns}
        self.restored = {column: _Digest() for column in columns}

    def verify(self) -> None:
        if bad := sorted(c for c, digest in self.staged.items() if digest.key() != self.restored[c].key()):
            raise IcebergExecError(
                f"z-order columns {bad} did not come back from their z-values intact (an engine bug); "
                "nothing was committed"
            )


@dataclass(frozen=True)
class _Restored:
    """Columns of a z-order staged only as its z-value (:func:`.zorder.zorder_restorable`) and a null
    mask, got back from them after the sort."""

    key: str
    columns: tuple[str, ...]
    #: the null mask's column: bit ``c`` of a row's ``uint8`` set when column ``c`` is null there
    nulls: str


def _sort_columns(
    keys: Sequence[AnyKey], spec: PartitionSpec, schema: Schema
) -> tuple[list[tuple[str, bool, bool]], list[tuple[list[str], Any]], list[_Restored]]:
    """The sort columns (name, ascending, nulls_first), the hidden ones computed for them (names,
    fn(batch) -> one array per name), and the z-order columns staged only as their z-value."""
    order: list[tuple[str, bool, bool]] = []
    computed: list[tuple[list[str], Any]] = []
    restored: list[_Restored] = []
    top_level = set(schema.as_arrow().names)
    for i, partition_field in enumerate(spec.fields):
        source = schema.find_field(partition_field.source_id)
        column = schema.find_column_name(partition_field.source_id)
        fn = partition_field.transform.pyarrow_transform(source.field_type)
        computed.append(([f"{_HIDDEN_PREFIX}p{i}"], _keyed(column, fn)))
        order.append((f"{_HIDDEN_PREFIX}p{i}", True, True))
    for j, key in enumerate(keys):
        if isinstance(key, ZOrder):
            name = f"{_HIDDEN_PREFIX}z{j}"
            restore = zorder_restorable(key, schema) and all(c in top_level for c in key.columns)
            hidden = [name, f"{name}n"] if restore else [name]
            computed.append((hidden, _zordered(key, zorder_width(key, schema), with_nulls=restore)))
            order.append((name, True, True))
            if restore:
                restored.append(_Restored(name, key.columns, f"{name}n"))
            continue
        source = schema.find_field(key.source_id)
        if key.transform == "identity" and key.column in top_level and "." not in key.column:
            # Sort on the column itself: a hidden copy doubled what was staged, sorted and spilled.
            order.append((key.column, key.ascending, key.nulls_first))
            continue
        transform = None if key.transform == "identity" else transform_of(key)
        key_fn = transform.pyarrow_transform(source.field_type) if transform else None
        computed.append(([f"{_HIDDEN_PREFIX}s{j}"], _keyed(key.column, key_fn)))
        order.append((f"{_HIDDEN_PREFIX}s{j}", key.ascending, key.nulls_first))
    return order, computed, restored


#: rows got back from z-values at a time: the restore costs per batch (4M rows: 6.1 s CPU in batches of a
#: few hundred rows, 4.6 s in 16K-row ones)
_RESTORE_ROWS = 16384


def _sorted_rows(
    batches: Iterator[pa.RecordBatch],
    names: list[str],
    types: dict[str, pa.DataType],
    restored: list[_Restored],
) -> Iterator[pa.RecordBatch]:
    """The sorted rows' columns ``names`` (with :func:`_restore` on batches of :data:`_RESTORE_ROWS`)."""
    import pyarrow as pa

    pending: list[pa.RecordBatch] = []
    rows = 0
    for arrow in batches:
        if not restored:
            yield arrow.select(list(range(len(names))))
            continue
        pending.append(arrow)
        rows += arrow.num_rows
        if rows >= _RESTORE_ROWS:
            yield _restore(pa.concat_batches(pending), names, types, restored)
            pending, rows = [], 0
    if pending:
        yield _restore(pa.concat_batches(pending), names, types, restored)


def _restore(
    arrow: pa.RecordBatch, names: list[str], types: dict[str, pa.DataType], restored: list[_Restored]
) -> pa.RecordBatch:
    """The batch's columns ``names``, the z-order columns got back from their z-values."""
    import numpy as np
    import pyarrow as pa

    values: dict[str, pa.Array] = {}
    for r in restored:
        numbers = zorder_columns(arrow.column(r.key), len(r.columns))
        masks = arrow.column(r.nulls).to_numpy(zero_copy_only=False)
        for number, (column, whole) in enumerate(zip(r.columns, numbers, strict=True)):
            nulls = (masks & np.uint8(1 << number)).astype(np.bool_)
            array = pa.array(whole, pa.int64(), mask=nulls if nulls.any() else None)
            kind = types[column]
            values[column] = array.view(kind) if pa.types.is_timestamp(kind) else array.cast(kind)
    return pa.RecordBatch.from_arrays(
        [values[name] if name in values else arrow.column(name) for name in names], names=names
    )


def _zordered(key: ZOrder, width: int, *, with_nulls: bool) -> Any:
    """The z-values of a batch (:func:`.zorder.zorder_values`), one hidden column, and with
    ``with_nulls`` the columns' null mask after it (:func:`_null_mask`)."""
    from airflow_provider_iceberg_exec.engine.io.write import column_of  # write imports this module

    def compute(batch: pa.RecordBatch) -> list[pa.Array]:
        columns = [column_of(batch, column) for column in key.columns]
        return [zorder_values(columns, key, width), *([_null_mask(columns)] if with_nulls else [])]

    return compute


def _null_mask(columns: Sequence[pa.Array]) -> pa.Array:
    """A ``uint8`` a row, bit ``c`` set when ``columns[c]`` is null: one primitive column through the
    sort instead of a boolean one a column (DataFusion's merge of 2.5M rows took 0.07-0.14 s more CPU
    with two boolean columns, 0.0-0.05 s with the mask).

    >>> import pyarrow as pa
    >>> _null_mask([pa.array([1, None, None]), pa.array([None, 2, None])]).to_pylist()
    [2, 1, 3]
    """
    import numpy as np
    import pyarrow as pa

    assert len(columns) <= 8, len(columns)  # a restorable z-order has at most two
    mask = np.zeros(len(columns[0]), dtype=np.uint8)
    for number, column in enumerate(columns):
        if column.null_count:
            mask |= column.is_null().to_numpy(zero_copy_only=False).astype(np.uint8) << np.uint8(number)
    return pa.array(mask, pa.uint8())


def _keyed(column: str | None, fn: Any) -> Any:
    from airflow_provider_iceberg_exec.engine.io.write import column_of  # write imports this module

    if column is None:
        raise ConfigurationError("a partition or sort field refers to a dropped column")

    def compute(batch: pa.RecordBatch) -> list[pa.Array]:
        values = column_of(batch, column)
        return [fn(values) if fn is not None else values]

    return compute

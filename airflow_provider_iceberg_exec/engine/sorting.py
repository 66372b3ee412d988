"""Sort orders: parsing Spark's ``sort_order`` text, reading a table's order, and matching the two.

An order is a tuple of :class:`SortKey`. Keys on a transform of a column (``day(ts)``, ``bucket(16, id)``)
are sorted on a hidden column computed with PyIceberg's transform, so the rows really follow the
table's order; only then are output files stamped with that order's id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.table.sorting import SortOrder
    from pyiceberg.transforms import Transform

__all__ = ["SortKey", "match_table_sort_order", "parse_sort_order", "table_sort_keys"]

_KEY_RE = re.compile(
    r"^\s*(?P<expr>.+?)(?:\s+(?P<dir>ASC|DESC))?(?:\s+NULLS\s+(?P<nulls>FIRST|LAST))?\s*$", re.IGNORECASE
)
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


def _transform_text(transform: str, column: str) -> str:
    match = re.match(r"^(\w+)\[(\d+)\]$", transform)
    if match:
        return f"{match.group(1)}({match.group(2)}, {column})"
    return f"{transform}({column})"


def parse_sort_order(text: str, schema: Schema) -> tuple[SortKey, ...]:
    """Parse ``"col ASC NULLS LAST, day(ts) DESC, ..."`` against ``schema``.

    Defaults follow Iceberg: ASC means NULLS FIRST, DESC means NULLS LAST.

    :raises ConfigurationError: for an empty order, an unknown column or transform, or a z-order.
    """
    from pyiceberg.transforms import UnknownTransform, parse_transform

    if text.strip().lower().startswith("zorder"):
        raise ConfigurationError(
            "z-order sort orders are not supported; give columns, e.g. 'id ASC NULLS LAST'"
        )
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
    keys: tuple[SortKey, ...], orders: dict[int, SortOrder], schema: Schema
) -> int | None:
    """The id of the table order that ``keys`` are exactly, or None (Java stamps 0 = unsorted then)."""
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

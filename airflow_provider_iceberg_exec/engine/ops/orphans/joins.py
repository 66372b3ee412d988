"""The joins of an orphan scan: DataFusion SQL over the staged listing (``listed``) and references
(``refs``).

Every join matches on ``h``, the 8-byte hash of the normalised path, with the side holding only keys (and
short schemes) as the hash join's build side, so memory follows the key count, not the paths. ``{bf}``
selects one hash bucket (reachable.bucket_filter) when the keys of one query would not fit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.meta.reachable import RefKind, bucket_filter
from airflow_provider_iceberg_exec.engine.ops.orphans.rules import PrefixMismatchMode

if TYPE_CHECKING:
    import pyarrow as pa
    from datafusion import SessionContext

__all__ = [
    "MISMATCHED_SQL",
    "MISSING_SQL",
    "ORPHANS_SQL",
    "bucketed",
    "prefix_mismatches",
    "sql_text",
    "stream",
]

log = logging.getLogger(__name__)

_CONFLICT_MESSAGE = (
    "Unable to determine whether certain files are orphan. Metadata references files that match "
    "listed/provided files except for authority/scheme. Please, inspect the conflicting authorities/schemes "
    "and provide which of them are equal by further configuring the action via equal_schemes and "
    "equal_authorities. Set the prefix mismatch mode to 'IGNORE' to ignore remaining locations with "
    "conflicting authorities/schemes or to 'DELETE' iff you are ABSOLUTELY confident that remaining "
    "conflicting authorities/schemes are different. It will be impossible to recover deleted files. "
    "Conflicting authorities/schemes: {conflicts}."
)

_OLD_LISTED = "SELECT h, uri, size, scheme, authority FROM listed WHERE mtime_ms < {cutoff} AND {bf}"
ORPHANS_SQL = (
    "SELECT l.uri, l.size FROM (SELECT h FROM refs WHERE {bf}) r "
    "RIGHT ANTI JOIN (" + _OLD_LISTED + ") l ON r.h = l.h"
)
# Old listed files whose path is referenced, but only under another scheme or authority (reference §3.3).
_MISMATCHED = (
    "SELECT m.h, m.uri, m.size, m.scheme, m.authority "
    "FROM (SELECT h, scheme, authority FROM refs WHERE {bf}) r RIGHT ANTI JOIN ("
    "SELECT l.h, l.uri, l.size, l.scheme, l.authority FROM (SELECT h FROM refs WHERE {bf}) p "
    "RIGHT SEMI JOIN (" + _OLD_LISTED + ") l ON p.h = l.h) m ON r.h = m.h "
    "AND (r.scheme = '' OR r.scheme = m.scheme) AND (r.authority = '' OR r.authority = m.authority)"
)
MISMATCHED_SQL = "SELECT uri, size FROM (" + _MISMATCHED + ")"
_CONFLICTS_SQL = (
    "SELECT DISTINCT r.scheme AS valid_scheme, x.scheme AS actual_scheme, r.authority AS valid_authority, "
    "x.authority AS actual_authority FROM (SELECT h, scheme, authority FROM refs WHERE {bf}) r "
    "JOIN (" + _MISMATCHED + ") x ON r.h = x.h LIMIT 100"
)
# Keys of referenced files under the scanned locations that the listing lacks; only keys cross the join.
MISSING_SQL = (
    "SELECT DISTINCT r.h FROM (SELECT h FROM listed WHERE {bf}) l RIGHT ANTI JOIN "
    "(SELECT h FROM refs WHERE kind <> '" + RefKind.VERSION_HINT.value + "' AND ({under}) AND {bf}) r "
    "ON l.h = r.h"
)


def bucketed(template: str, buckets: int, **values: Any) -> Iterator[str]:
    """``template`` once per hash bucket."""
    for bucket in range(buckets):
        yield template.format(bf=bucket_filter("h", bucket, buckets), **values)


def stream(ctx: SessionContext, queries: Iterable[str]) -> Iterator[pa.RecordBatch]:
    """The non-empty batches of ``queries``, one query after the other, streamed."""
    for query in queries:
        for batch in ctx.sql(query).execute_stream():
            arrow: pa.RecordBatch = batch.to_pyarrow()
            if arrow.num_rows:
                yield arrow


def sql_text(value: str) -> str:
    """``value`` as an SQL string literal.

    >>> sql_text("it's")
    "'it''s'"
    """
    return "'" + value.replace("'", "''") + "'"


def prefix_mismatches(ctx: SessionContext, cutoff_ms: int, mode: PrefixMismatchMode, buckets: int) -> int:
    """Count listed files referenced only under another scheme or authority; raise under ERROR."""
    count = sum(int(b.num_rows) for b in stream(ctx, bucketed(MISMATCHED_SQL, buckets, cutoff=cutoff_ms)))
    if count and mode is PrefixMismatchMode.ERROR:
        conflicts: set[tuple[str, str]] = set()
        for batch in stream(ctx, bucketed(_CONFLICTS_SQL, buckets, cutoff=cutoff_ms)):
            for row in batch.to_pylist():
                if row["valid_scheme"] and row["valid_scheme"] != row["actual_scheme"]:
                    conflicts.add((row["valid_scheme"], row["actual_scheme"]))
                if row["valid_authority"] and row["valid_authority"] != row["actual_authority"]:
                    conflicts.add((row["valid_authority"], row["actual_authority"]))
        text = ", ".join(f"({valid}, {actual})" for valid, actual in sorted(conflicts))
        raise ConfigurationError(_CONFLICT_MESSAGE.format(conflicts=f"[{text}]"))
    if count:
        log.warning(
            "%d listed file(s) are referenced under another scheme or authority; %s",
            count,
            "treated as orphans (DELETE)" if mode is PrefixMismatchMode.DELETE else "ignored (IGNORE)",
        )
    return count

"""Listing a table's storage for an orphan scan, and the checks that the listing (and the reference set)
is complete.

The locations (the table's, and ``write.data.path`` / ``write.metadata.path`` when they lie outside it)
are listed directory by directory through the table's file system, skipping hidden names as Java does,
into a staged Parquet file. A listing that lacks a referenced file that existed when it began, or a
reference set missing a whole category, aborts the scan (:class:`~.errors.IncompleteListingError`):
calling files orphans from a partial picture would delete live data.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, IncompleteListingError
from airflow_provider_iceberg_exec.engine.meta.reachable import (
    ROWS_PER_ROW_GROUP,
    PathNormalizer,
    RefKind,
    filesystem_for,
    path_hash,
)
from airflow_provider_iceberg_exec.engine.ops.orphans.joins import MISSING_SQL, bucketed, sql_text, stream

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from datafusion import SessionContext
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table

__all__ = [
    "Location",
    "StagedListing",
    "check_categories",
    "check_listing_complete",
    "hidden_partition_prefixes",
    "is_hidden",
    "scan_locations",
    "stage_listing",
]

log = logging.getLogger(__name__)

_NEVER_OLD_MS = 2**62
#: referenced files missing from the listing that are checked one by one before giving up
_MAX_MISSING_PROBES = 1000
#: keys of missing references looked up (hidden ones among them are skipped) before giving up
_MAX_MISSING_KEYS = 10_000


@dataclass(frozen=True)
class Location:
    uri: str  # as the user or the table wrote it, without a trailing slash
    path: str  # normalised path, without a trailing slash


def scan_locations(table: Table, location: str | None, normalizer: PathNormalizer) -> list[Location]:
    if location is not None and not location.strip():
        raise ConfigurationError("location must not be empty")
    if location:
        candidates = [location.strip()]
    else:
        properties = table.metadata.properties
        candidates = [table.location()]
        candidates += [properties[k] for k in ("write.data.path", "write.metadata.path") if properties.get(k)]
    chosen: list[tuple[tuple[str, str, str], Location]] = []
    for uri in candidates:
        scheme, authority, path = normalizer.split(uri)
        path = path.rstrip("/")
        if not path:
            raise ConfigurationError(f"refusing to list the root of {uri!r}")
        chosen.append(((scheme, authority, path + "/"), Location(uri.rstrip("/"), path)))
    # A location under another one (same scheme and authority) is listed with it; the order is kept.
    kept: list[Location] = []
    for index, (key, loc) in enumerate(chosen):
        covered = any(
            key[:2] == other[:2] and key[2].startswith(other[2]) and (other[2] != key[2] or j < index)
            for j, (other, _) in enumerate(chosen)
            if j != index
        )
        if not covered:
            kept.append(loc)
    return kept


def hidden_partition_prefixes(table: Table) -> tuple[str, ...]:
    """``field=`` of the partition fields named ``_...`` or ``.…`` (Java's partition-aware hidden filter)."""
    names = {f.name for spec in table.metadata.specs().values() for f in spec.fields}
    return tuple(sorted(f"{n}=" for n in names if n.startswith(("_", "."))))


def is_hidden(name: str, partition_prefixes: tuple[str, ...]) -> bool:
    return name.startswith(("_", ".")) and not name.startswith(partition_prefixes)


class _ListingStager:
    """Stream listed files into a local Parquet file."""

    def __init__(self, path: str, cutoff_ms: int) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.cutoff_ms = cutoff_ms
        self.schema = pa.schema(
            [
                pa.field("uri", pa.string(), nullable=False),
                pa.field("scheme", pa.string(), nullable=False),
                pa.field("authority", pa.string(), nullable=False),
                pa.field("path", pa.string(), nullable=False),
                pa.field("h", pa.int64(), nullable=False),
                pa.field("size", pa.int64(), nullable=False),
                pa.field("mtime_ms", pa.int64(), nullable=False),
            ]
        )
        self.writer = pq.ParquetWriter(path, self.schema, compression="lz4")
        self.columns: dict[str, list[Any]] = {name: [] for name in self.schema.names}
        self.count = 0
        self.old = 0

    def add(self, uri: str, scheme: str, authority: str, path: str, size: int, mtime_ms: int) -> None:
        columns = self.columns
        columns["uri"].append(uri)
        columns["scheme"].append(scheme)
        columns["authority"].append(authority)
        columns["path"].append(path)
        columns["h"].append(path_hash(path))
        columns["size"].append(size)
        columns["mtime_ms"].append(mtime_ms)
        self.count += 1
        self.old += mtime_ms < self.cutoff_ms
        if len(columns["uri"]) >= ROWS_PER_ROW_GROUP:
            self.flush()

    def flush(self) -> None:
        import pyarrow as pa

        if self.columns["uri"]:
            batch: pa.RecordBatch = pa.record_batch(
                [self.columns[n] for n in self.schema.names], schema=self.schema
            )
            self.writer.write_batch(batch)
            for values in self.columns.values():
                values.clear()

    def close(self) -> None:
        self.flush()
        self.writer.close()


@dataclass(frozen=True)
class StagedListing:
    path: str
    file_count: int
    old_count: int


def stage_listing(
    io: FileIO,
    locations: Sequence[Location],
    normalizer: PathNormalizer,
    partition_prefixes: tuple[str, ...],
    path: str,
    cutoff_ms: int,
) -> StagedListing:
    stager = _ListingStager(path, cutoff_ms)
    try:
        for location in locations:
            fs, base = filesystem_for(io, location.uri)
            base = base.rstrip("/") or "/"
            before = stager.count
            # Every listed file shares the location's scheme and authority; its path is the location's
            # (normalised) plus what the listing adds, which has no repeated slashes.
            scheme, authority, _path = normalizer.split(location.uri)
            start = len(base)
            for fs_path, size, mtime_ms in _walk(fs, base, partition_prefixes):
                rel = fs_path[start:]
                stager.add(location.uri + rel, scheme, authority, location.path + rel, size, mtime_ms)
            log.info("listed %d file(s) under %s", stager.count - before, location.uri)
    finally:
        stager.close()
    return StagedListing(path, stager.count, stager.old)


def _walk(
    fs: pafs.FileSystem, base: str, partition_prefixes: tuple[str, ...]
) -> Iterator[tuple[str, int, int]]:
    """Yield ``(path, size, mtime_ms)`` of every visible file under ``base``, one directory at a time.

    On a local file system ``os.scandir`` streams each directory; elsewhere each directory is listed with
    one non-recursive ``get_file_info``, so memory follows the largest directory, not the tree. Hidden
    names are never entered.
    """
    import pyarrow.fs as pafs

    if isinstance(fs, pafs.LocalFileSystem):
        yield from _walk_local(base, partition_prefixes)
        return
    stack = [base]
    while stack:
        directory = stack.pop()
        selector = pafs.FileSelector(directory, recursive=False, allow_not_found=True)
        for info in fs.get_file_info(selector):
            if is_hidden(info.base_name, partition_prefixes):
                continue
            if info.type == pafs.FileType.Directory:
                stack.append(info.path)
            elif info.type == pafs.FileType.File:
                mtime_ns = info.mtime_ns
                yield (
                    info.path,
                    int(info.size or 0),
                    _NEVER_OLD_MS if mtime_ns is None else mtime_ns // 1_000_000,
                )


def _walk_local(base: str, partition_prefixes: tuple[str, ...]) -> Iterator[tuple[str, int, int]]:
    stack = [base]
    while stack:
        directory = stack.pop()
        try:
            entries = os.scandir(directory)
        except FileNotFoundError:
            continue
        with entries:
            for entry in entries:
                if is_hidden(entry.name, partition_prefixes):
                    continue
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                        continue
                    if not entry.is_file():
                        continue
                    st = entry.stat()
                except FileNotFoundError:
                    continue  # removed while listed (a failed commit's cleanup, say): not an orphan
                yield entry.path, st.st_size, st.st_mtime_ns // 1_000_000


def check_categories(counts: Mapping[RefKind, int], snapshot_count: int, table: str) -> None:
    if snapshot_count == 0:
        return
    categories = {
        "data": counts[RefKind.DATA] + counts[RefKind.POSITION_DELETES] + counts[RefKind.EQUALITY_DELETES],
        "manifest": counts[RefKind.MANIFEST],
        "manifest-list": counts[RefKind.MANIFEST_LIST],
        "metadata": counts[RefKind.METADATA],
    }
    empty = [name for name, count in categories.items() if count == 0]
    if empty:
        raise IncompleteListingError(
            f"{table} has {snapshot_count} snapshot(s) but no {', '.join(empty)} reference(s) were read; "
            "the reference set looks incomplete, so no file is called an orphan"
        )


def check_listing_complete(
    ctx: SessionContext,
    io: FileIO,
    locations: Sequence[Location],
    partition_prefixes: tuple[str, ...],
    listing: StagedListing,
    listing_started_ms: int,
    table: str,
    buckets: int,
) -> None:
    """Abort when a referenced file under the scanned locations is missing from the listing.

    A file written after the listing began (a concurrent commit) is expected to be missing; one that exists
    and is older means the listing was cut short. Files under hidden directories are never listed.

    :raises IncompleteListingError: naming a sample of the missing files.
    """
    keys = _missing_keys(ctx, locations, buckets)
    if not keys:
        return
    roots = sorted((loc.path + "/" for loc in locations), key=len, reverse=True)
    missing: list[str] = []
    probes = 0
    for uri in _visible_references(ctx, keys[:_MAX_MISSING_KEYS], roots, partition_prefixes):
        probes += 1
        if probes > _MAX_MISSING_PROBES:
            continue
        if not _written_since(io, uri, listing_started_ms):
            missing.append(uri)
    if len(keys) > _MAX_MISSING_KEYS and not missing:
        raise IncompleteListingError(
            f"more than {_MAX_MISSING_KEYS} files that {table} references are missing from the listing of "
            f"{listing.file_count} file(s); the listing looks partial, so no file is called an orphan"
        )
    if missing:
        sample = ", ".join(missing[:5])
        more = "+" if probes > _MAX_MISSING_PROBES or len(keys) > _MAX_MISSING_KEYS else ""
        raise IncompleteListingError(
            f"{len(missing)}{more} file(s) that {table} references are "
            f"missing from the listing of {listing.file_count} file(s), e.g. {sample}; the listing looks "
            "partial (or the files are gone), so no file is called an orphan"
        )


def _missing_keys(ctx: SessionContext, locations: Sequence[Location], buckets: int) -> list[int]:
    """Up to ``_MAX_MISSING_KEYS + 1`` keys of referenced files under ``locations`` the listing lacks."""
    under = " OR ".join(f"starts_with(path, {sql_text(loc.path + '/')})" for loc in locations)
    keys: list[int] = []
    for arrow in stream(ctx, bucketed(MISSING_SQL, buckets, under=under)):
        keys.extend(arrow.column(0).to_pylist()[: _MAX_MISSING_KEYS + 1 - len(keys)])
        if len(keys) > _MAX_MISSING_KEYS:
            break
    return keys


def _visible_references(
    ctx: SessionContext, keys: Sequence[int], roots: Sequence[str], partition_prefixes: tuple[str, ...]
) -> Iterator[str]:
    """The referenced files with ``keys`` that the listing should have seen: under one of ``roots`` and not
    under a hidden directory (another file with the same key, or one under a hidden name, is skipped)."""
    for start in range(0, len(keys), 1000):
        chunk = ", ".join(str(k) for k in keys[start : start + 1000])
        for arrow in stream(ctx, [f"SELECT DISTINCT uri, path FROM refs WHERE h IN ({chunk})"]):
            for uri, path in zip(arrow.column(0).to_pylist(), arrow.column(1).to_pylist(), strict=True):
                root = next((r for r in roots if path.startswith(r)), None)
                if root is None or any(
                    is_hidden(part, partition_prefixes) for part in path[len(root) :].split("/")
                ):
                    continue
                yield uri


def _written_since(io: FileIO, uri: str, listing_started_ms: int) -> bool:
    """Whether ``uri`` exists and was written after the listing began (so the listing could not see it)."""
    import pyarrow.fs as pafs

    fs, fs_path = filesystem_for(io, uri)
    info = fs.get_file_info(fs_path)
    return info.type != pafs.FileType.NotFound and (info.mtime_ns or 0) // 1_000_000 >= listing_started_ms

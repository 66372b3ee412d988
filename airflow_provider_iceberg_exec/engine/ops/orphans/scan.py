"""The orphan scan: list the storage, stage the references, anti-join them, write the orphan list.

In bounded memory:

1. refuses a table with ``gc.enabled=false`` and, unless forced, an ``older_than`` less than 24 hours ago;
2. lists the table's locations into a staged Parquet file (:mod:`.listing`);
3. then refreshes the table and stages every file its metadata references
   (:mod:`airflow_provider_iceberg_exec.engine.meta.reachable`) into another;
4. anti-joins the two in DataFusion (:mod:`.joins`), bucketed to fit the memory limit;
5. aborts when a referenced file is missing from the listing (the listing is partial) or when a reference
   category comes back empty for a table with snapshots; applies ``prefix_mismatch_mode``;
6. streams the orphans into the list file and writes the result document beside it (:mod:`.documents`).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.contracts import ORPHAN_SCAN_RESULT, OrphanScanResult
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.io.catalog import table_name
from airflow_provider_iceberg_exec.engine.io.session import ExecutionStats, datafusion_errors, track_resources
from airflow_provider_iceberg_exec.engine.meta.reachable import (
    PathNormalizer,
    ReferenceStager,
    bucket_count,
    parse_older_than,
    stage_table_references,
    staged_session,
)
from airflow_provider_iceberg_exec.engine.ops.orphans.documents import (
    OrphanListWriter,
    default_list_uri,
    result_uri,
    write_text,
)
from airflow_provider_iceberg_exec.engine.ops.orphans.joins import (
    MISMATCHED_SQL,
    ORPHANS_SQL,
    bucketed,
    prefix_mismatches,
    stream,
)
from airflow_provider_iceberg_exec.engine.ops.orphans.listing import (
    Location,
    StagedListing,
    check_categories,
    check_listing_complete,
    hidden_partition_prefixes,
    scan_locations,
    stage_listing,
)
from airflow_provider_iceberg_exec.engine.ops.orphans.rules import (
    DEFAULT_ORPHAN_AGE,
    MIN_ORPHAN_AGE,
    PrefixMismatchMode,
    check_gc_enabled,
)

if TYPE_CHECKING:
    from datafusion import SessionContext
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata

__all__ = ["scan_orphan_files"]

log = logging.getLogger(__name__)

_INTERVAL_MESSAGE = (
    "Cannot remove orphan files with an interval less than 24 hours. Executing this procedure with a short "
    "interval may corrupt the table if other operations are happening at the same time. If you are "
    "absolutely confident that no concurrent operations will be affected by removing orphan files with such "
    "a short interval, pass force=True (--force)."
)
#: bytes one row of a join's build side takes in DataFusion's accounting (an 8-byte key, sometimes a short
#: scheme and authority; measured 140-250 bytes with the hash table and the build batches)
_BUILD_ROW_BYTES = 256


def scan_orphan_files(
    table: Table,
    *,
    older_than: str | int | float | datetime.datetime | None = None,
    location: str | None = None,
    equal_schemes: Mapping[str, str] | None = None,
    equal_authorities: Mapping[str, str] | None = None,
    prefix_mismatch_mode: str | PrefixMismatchMode = PrefixMismatchMode.ERROR,
    orphan_list_uri: str | None = None,
    force: bool = False,
    limits: ResourceLimits | None = None,
    now: datetime.datetime | None = None,
) -> OrphanScanResult:
    """Find the orphan files of ``table`` and write their list; delete nothing (Spark's ``dry_run``).

    :param older_than: only files modified before this are orphans: a duration ago (``"3d"``), a
        timestamp, epoch milliseconds or a datetime; default 3 days ago.
    :param location: the location to list instead of the table's (Java's ``location``).
    :param equal_schemes: schemes to treat as equal, added to ``{"s3a,s3n": "s3"}``.
    :param equal_authorities: authorities to treat as equal.
    :param prefix_mismatch_mode: ``ERROR`` (default), ``IGNORE`` or ``DELETE``, as in Java.
    :param orphan_list_uri: where to write the orphan list (default:
        ``<table location>/metadata/iceberg-exec-staging/orphans-<uuid>.txt``); the result document is
        written beside it with the suffix ``.json``.
    :param force: allow ``older_than`` less than 24 hours ago.
    :param limits: the memory limit and spill directory of the anti-join.
    :param now: the current time (for tests).
    :returns: ``iceberg-exec/orphan-scan-result@1`` with ``orphan_file_count``, ``orphan_bytes_count``, an
        ``orphan_sample`` of at most 20 paths and ``orphan_list_uri``.
    :raises ConfigurationError: for ``gc.enabled=false``, a too recent ``older_than``, a bad mode, or a
        prefix mismatch under ``ERROR``.
    :raises IncompleteListingError: when the listing cannot be complete.
    :raises ResourceLimitError: when the memory pool or the spill disk runs out.

    >>> import os, tempfile, time, pyarrow as pa
    >>> from pyiceberg.catalog.sql import SqlCatalog
    >>> workdir = tempfile.TemporaryDirectory()
    >>> catalog = SqlCatalog("demo", uri=f"sqlite:///{workdir.name}/c.db", warehouse=f"file://{workdir.name}")
    >>> catalog.create_namespace("ns")
    >>> table = catalog.create_table("ns.t", schema=pa.schema([("id", pa.int64())]))
    >>> for i in range(3):
    ...     table.append(pa.table({"id": [i]}))
    >>> stray = f"{workdir.name}/ns/t/data/stray.parquet"  # written by a task that died before its commit
    >>> open(stray, "wb").close()
    >>> os.utime(stray, (time.time() - 10 * 86400,) * 2)
    >>> result = scan_orphan_files(table, limits=ResourceLimits(memory_limit_bytes=256 << 20))
    >>> result["orphan_file_count"], result["orphan_sample"] == [f"file://{stray}"], os.path.exists(stray)
    (1, True, True)
    >>> catalog.engine.dispose(); workdir.cleanup()
    """
    limits = limits or ResourceLimits()
    now = (now or datetime.datetime.now(datetime.timezone.utc)).astimezone(datetime.timezone.utc)
    mode = PrefixMismatchMode.parse(prefix_mismatch_mode)
    normalizer = PathNormalizer.of(equal_schemes, equal_authorities)
    plan = _plan_scan(
        table,
        older_than=older_than,
        location=location,
        normalizer=normalizer,
        mode=mode,
        orphan_list_uri=orphan_list_uri,
        force=force,
        now=now,
    )
    with track_resources(limits) as (spill_dir, stats):
        found = _find_orphans(table, plan, limits, spill_dir)
    doc = _scan_document(plan, found, stats)
    write_text(table.io, plan.result_uri, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    log.info(
        "%s: %d orphan file(s), %d bytes, of %d listed under %s (older than %s); list at %s; peak RSS %d MiB",
        plan.name,
        found.orphans.count,
        found.orphans.bytes,
        found.listing.file_count,
        ", ".join(doc["locations"]),
        doc["older_than"],
        plan.list_uri,
        stats.peak_rss_bytes >> 20,
    )
    return doc


@dataclass(frozen=True)
class _ScanPlan:
    """What one scan lists and how it judges the files: decided before anything is listed."""

    name: str
    mode: PrefixMismatchMode
    normalizer: PathNormalizer
    cutoff: datetime.datetime
    cutoff_ms: int
    locations: list[Location]
    list_uri: str
    result_uri: str


def _plan_scan(
    table: Table,
    *,
    older_than: str | int | float | datetime.datetime | None,
    location: str | None,
    normalizer: PathNormalizer,
    mode: PrefixMismatchMode,
    orphan_list_uri: str | None,
    force: bool,
    now: datetime.datetime,
) -> _ScanPlan:
    """Refresh the table and check Java's refusals (``gc.enabled``, the 24-hour floor); pick the locations
    to list and where the list and the result go."""
    table.refresh()
    check_gc_enabled(table)
    cutoff = parse_older_than(older_than, now) if older_than is not None else now - DEFAULT_ORPHAN_AGE
    if now - cutoff < MIN_ORPHAN_AGE and not force:
        raise ConfigurationError(_INTERVAL_MESSAGE)
    locations = scan_locations(table, location, normalizer)
    list_uri = orphan_list_uri or default_list_uri(table.location())
    return _ScanPlan(
        name=table_name(table),
        mode=mode,
        normalizer=normalizer,
        cutoff=cutoff,
        cutoff_ms=int(cutoff.timestamp() * 1000),
        locations=locations,
        list_uri=list_uri,
        result_uri=result_uri(list_uri),
    )


@dataclass(frozen=True)
class _Found:
    """What the listing, the references and the joins found."""

    metadata: TableMetadata
    metadata_location: str
    listing: StagedListing
    referenced_file_count: int
    prefix_mismatch_file_count: int
    orphans: OrphanListWriter


def _find_orphans(table: Table, plan: _ScanPlan, limits: ResourceLimits, spill_dir: str) -> _Found:
    """List the storage, then stage the references of the metadata of that moment, check that both are
    complete, and write the orphan list."""
    listing_started_ms = int(time.time() * 1000)
    hidden_prefixes = hidden_partition_prefixes(table)
    listing = stage_listing(
        table.io,
        plan.locations,
        plan.normalizer,
        hidden_prefixes,
        os.path.join(spill_dir, "listed.parquet"),
        plan.cutoff_ms,
    )
    # References are read after the listing, so that a file committed meanwhile is referenced.
    table.refresh()
    check_gc_enabled(table)
    metadata = table.metadata
    refs_path = os.path.join(spill_dir, "referenced.parquet")
    with ReferenceStager(refs_path, plan.normalizer) as stager:
        stage_table_references(stager, table.io, metadata, metadata_location=table.metadata_location)
    check_categories(stager.counts, len(metadata.snapshots), plan.name)
    buckets = bucket_count(max(listing.file_count, stager.total), _BUILD_ROW_BYTES, limits)
    with datafusion_errors():
        ctx = staged_session(limits, spill_dir, {"listed": listing.path, "refs": refs_path})
        check_listing_complete(
            ctx, table.io, plan.locations, hidden_prefixes, listing, listing_started_ms, plan.name, buckets
        )
        mismatched = prefix_mismatches(ctx, plan.cutoff_ms, plan.mode, buckets)
        orphans = _write_orphan_list(ctx, table, plan, buckets)
    return _Found(metadata, table.metadata_location, listing, stager.total, mismatched, orphans)


def _write_orphan_list(ctx: SessionContext, table: Table, plan: _ScanPlan, buckets: int) -> OrphanListWriter:
    """Stream the orphans (and, under ``DELETE``, the prefix mismatches) into the list file."""
    with OrphanListWriter(table.io, plan.list_uri) as out:
        out.write(stream(ctx, bucketed(ORPHANS_SQL, buckets, cutoff=plan.cutoff_ms)))
        if plan.mode is PrefixMismatchMode.DELETE:
            out.write(stream(ctx, bucketed(MISMATCHED_SQL, buckets, cutoff=plan.cutoff_ms)))
    return out


def _scan_document(plan: _ScanPlan, found: _Found, stats: ExecutionStats) -> OrphanScanResult:
    """The ``iceberg-exec/orphan-scan-result@1`` document of a finished scan."""
    metadata = found.metadata
    return {
        "schema": ORPHAN_SCAN_RESULT,
        "table": plan.name,
        "table_uuid": str(metadata.table_uuid),
        "metadata_location": found.metadata_location,
        "snapshot_count": len(metadata.snapshots),
        "locations": [loc.uri for loc in plan.locations],
        "older_than": plan.cutoff.isoformat(),
        "older_than_ms": plan.cutoff_ms,
        "prefix_mismatch_mode": plan.mode.value,
        "equal_schemes": dict(plan.normalizer.equal_schemes),
        "equal_authorities": dict(plan.normalizer.equal_authorities),
        "listed_file_count": found.listing.file_count,
        "candidate_file_count": found.listing.old_count,
        "referenced_file_count": found.referenced_file_count,
        "prefix_mismatch_file_count": found.prefix_mismatch_file_count,
        "orphan_file_count": found.orphans.count,
        "orphan_bytes_count": found.orphans.bytes,
        "orphan_sample": found.orphans.sample,
        "orphan_list_uri": plan.list_uri,
        "result_uri": plan.result_uri,
        "dry_run": True,
        "peak_rss_bytes": stats.peak_rss_bytes,
        "spilled_bytes": stats.spilled_bytes,
        "elapsed_seconds": round(stats.elapsed_seconds, 3),
    }

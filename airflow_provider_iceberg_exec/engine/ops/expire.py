"""Snapshot expiry with Java's rules, then deletion of the files only the expired snapshots reached.

Java's ``RemoveSnapshots`` decides what to keep (reference §1.4):

- every branch and tag whose age (now minus its snapshot's timestamp) is within its ``max-ref-age-ms``
  (default ``history.expire.max-ref-age-ms``, unlimited) is kept, ``main`` always;
- for each kept branch, its ancestors are kept while fewer than ``min-snapshots-to-keep`` (default
  ``retain_last``, else ``history.expire.min-snapshots-to-keep``, 1) are kept or they are not older than
  ``max-snapshot-age-ms`` (default ``older_than``, else now minus ``history.expire.max-snapshot-age-ms``,
  5 days); every tagged snapshot is kept;
- a snapshot no ref reaches is kept while it is not older than ``older_than``;
- everything else expires, and so do the snapshots named in ``snapshot_ids`` (unless a kept ref points
  at one: that is an error).

The metadata change is committed through PyIceberg (``ManageSnapshots`` for expired refs,
``ExpireSnapshots`` for the snapshots, in one transaction). Then the files reachable before and not after
are deleted, as Spark's ``ExpireSnapshotsSparkAction`` does (the reachable-set difference): both sets are
staged as Parquet and anti-joined in DataFusion within the memory limit.
"""

from __future__ import annotations

import datetime
import functools
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.commit.cleanup import ReferenceGuard, normalised_path
from airflow_provider_iceberg_exec.engine.commit.pyiceberg_producer import apply_updates, v3_metadata_writer
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.contracts import EXPIRE_SNAPSHOTS_RESULT, ExpireSnapshotsResult
from airflow_provider_iceberg_exec.engine.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    ConfigurationError,
)
from airflow_provider_iceberg_exec.engine.io.catalog import table_name
from airflow_provider_iceberg_exec.engine.io.session import ExecutionStats, datafusion_errors, track_resources
from airflow_provider_iceberg_exec.engine.meta.reachable import (
    PathNormalizer,
    ReferenceStager,
    RefKind,
    bucket_count,
    bucket_filter,
    bulk_remover,
    filesystem_for,
    gc_enabled,
    parse_older_than,
    snapshot_manifests,
    stage_table_references,
    staged_session,
)

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table, Transaction
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.refs import SnapshotRef
    from pyiceberg.table.snapshots import Snapshot

__all__ = ["DEFAULT_MAX_SNAPSHOT_AGE_MS", "ExpiryPlan", "expire_snapshots", "plan_expiry"]

log = logging.getLogger(__name__)

MAX_SNAPSHOT_AGE_MS = "history.expire.max-snapshot-age-ms"
MIN_SNAPSHOTS_TO_KEEP = "history.expire.min-snapshots-to-keep"
MAX_REF_AGE_MS = "history.expire.max-ref-age-ms"
#: Java's ``MAX_SNAPSHOT_AGE_MS_DEFAULT``: 5 days
DEFAULT_MAX_SNAPSHOT_AGE_MS = 5 * 24 * 3600 * 1000
DEFAULT_MIN_SNAPSHOTS_TO_KEEP = 1
DEFAULT_MAX_REF_AGE_MS = 2**63 - 1
DEFAULT_MAX_CONCURRENT_DELETES = 8
_MAIN = "main"
_GC_MESSAGE = "Cannot expire snapshots: GC is disabled (deleting files may corrupt other tables)"
_DELETE_CHUNK = 1000
#: delete outcomes that are not failures
_NOT_FAILED = frozenset({"deleted", "missing", "referenced"})
#: memory per row, in DataFusion's accounting, of a hash join's key side and of a deduplicated candidate
_KEY_ROW_BYTES = 256
_DISTINCT_ROW_BYTES = 512

#: result counter of each kind of reference
_RESULT_NAMES = {
    RefKind.DATA: "deleted_data_files_count",
    RefKind.POSITION_DELETES: "deleted_position_delete_files_count",
    RefKind.EQUALITY_DELETES: "deleted_equality_delete_files_count",
    RefKind.MANIFEST: "deleted_manifest_files_count",
    RefKind.MANIFEST_LIST: "deleted_manifest_lists_count",
    RefKind.STATISTICS: "deleted_statistics_files_count",
    RefKind.PARTITION_STATISTICS: "deleted_statistics_files_count",
}


@dataclass(frozen=True)
class ExpiryPlan:
    """What one expiry removes from the metadata: snapshot ids and ref names."""

    snapshot_ids: frozenset[int] = frozenset()
    refs: tuple[str, ...] = ()
    older_than_ms: int = 0
    retain_last: int = DEFAULT_MIN_SNAPSHOTS_TO_KEEP

    @property
    def empty(self) -> bool:
        """Whether nothing expires."""
        return not self.snapshot_ids and not self.refs


def _int_property(properties: Mapping[str, str], name: str, default: int) -> int:
    value = properties.get(name)
    if value is None:
        return default
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigurationError(f"table property {name}={value!r} is not an integer") from None


def plan_expiry(
    metadata: TableMetadata,
    *,
    now_ms: int,
    older_than_ms: int | None = None,
    retain_last: int | None = None,
    snapshot_ids: Iterable[int] = (),
) -> ExpiryPlan:
    """Decide which snapshots and refs expire, as Java's ``RemoveSnapshots.internalApply`` does.

    Pure: reads ``metadata`` only.

    :param now_ms: the current time, epoch milliseconds.
    :param older_than_ms: ``expireOlderThan``; default now minus ``history.expire.max-snapshot-age-ms``.
    :param retain_last: ``retainLast``; default ``history.expire.min-snapshots-to-keep`` (1).
    :param snapshot_ids: snapshots to expire explicitly.
    :raises ConfigurationError: for ``retain_last < 1``, an unknown snapshot id, or an id a kept ref
        points at.

    >>> import os, tempfile, time, pyarrow as pa
    >>> from pyiceberg.catalog.sql import SqlCatalog
    >>> workdir = tempfile.TemporaryDirectory()
    >>> catalog = SqlCatalog("demo", uri=f"sqlite:///{workdir.name}/c.db", warehouse=f"file://{workdir.name}")
    >>> catalog.create_namespace("ns")
    >>> table = catalog.create_table("ns.t", schema=pa.schema([("id", pa.int64())]))
    >>> for i in range(3):
    ...     table.append(pa.table({"id": [i]}))
    >>> later = int(time.time() * 1000) + 1000
    >>> plan = plan_expiry(table.metadata, now_ms=later, older_than_ms=later, retain_last=1)
    >>> len(plan.snapshot_ids), plan.refs
    (2, ())
    >>> catalog.engine.dispose(); workdir.cleanup()
    """
    properties = metadata.properties
    if retain_last is not None and retain_last < 1:
        raise ConfigurationError(
            f"Number of snapshots to retain must be at least 1, cannot be: {retain_last}"
        )
    default_older_than = (
        older_than_ms
        if older_than_ms is not None
        else now_ms - _int_property(properties, MAX_SNAPSHOT_AGE_MS, DEFAULT_MAX_SNAPSHOT_AGE_MS)
    )
    default_keep = (
        retain_last
        if retain_last is not None
        else _int_property(properties, MIN_SNAPSHOTS_TO_KEEP, DEFAULT_MIN_SNAPSHOTS_TO_KEEP)
    )
    default_max_ref_age = _int_property(properties, MAX_REF_AGE_MS, DEFAULT_MAX_REF_AGE_MS)
    snapshots = {s.snapshot_id: s for s in metadata.snapshots}
    explicit = set(snapshot_ids)
    unknown = sorted(explicit - set(snapshots))
    if unknown:
        raise ConfigurationError(f"snapshot(s) {unknown} are not in the table; nothing expired")
    if not snapshots:
        return ExpiryPlan(older_than_ms=default_older_than, retain_last=default_keep)

    retained_refs = _retained_refs(metadata, snapshots, now_ms, default_max_ref_age)
    refs_by_id: dict[int, list[str]] = {}
    for name, ref in retained_refs.items():
        refs_by_id.setdefault(ref.snapshot_id, []).append(name)
    held = {sid: sorted(names) for sid, names in refs_by_id.items() if sid in explicit}
    if held:
        sid, names = min(held.items())
        raise ConfigurationError(f"Cannot expire {sid}. Still referenced by refs: {names}")

    keep: set[int] = set(refs_by_id)
    reachable_from_refs: set[int] = set()
    for ref in retained_refs.values():
        if ref.snapshot_ref_type.value != "branch":
            reachable_from_refs.add(ref.snapshot_id)
            continue
        lineage = list(_ancestors(snapshots, ref.snapshot_id))
        reachable_from_refs.update(s.snapshot_id for s in lineage)
        keep |= _branch_snapshots_to_retain(
            lineage,
            now_ms - ref.max_snapshot_age_ms if ref.max_snapshot_age_ms is not None else default_older_than,
            ref.min_snapshots_to_keep if ref.min_snapshots_to_keep is not None else default_keep,
        )
    for snapshot in metadata.snapshots:
        if snapshot.snapshot_id not in reachable_from_refs and snapshot.timestamp_ms >= default_older_than:
            keep.add(snapshot.snapshot_id)
    expired = (set(snapshots) - keep) | explicit
    return ExpiryPlan(
        snapshot_ids=frozenset(expired),
        refs=tuple(sorted(set(metadata.refs) - set(retained_refs))),
        older_than_ms=default_older_than,
        retain_last=default_keep,
    )


def _retained_refs(
    metadata: TableMetadata, snapshots: Mapping[int, Snapshot], now_ms: int, default_max_ref_age: int
) -> dict[str, SnapshotRef]:
    """Java's ``computeRetainedRefs``: main, and every ref whose snapshot is within its max ref age."""
    retained: dict[str, SnapshotRef] = {}
    for name, ref in metadata.refs.items():
        if name == _MAIN:
            retained[name] = ref
            continue
        snapshot = snapshots.get(ref.snapshot_id)
        if snapshot is None:
            log.warning("removing invalid ref %s: snapshot %s does not exist", name, ref.snapshot_id)
            continue
        max_ref_age = ref.max_ref_age_ms if ref.max_ref_age_ms is not None else default_max_ref_age
        if now_ms - snapshot.timestamp_ms <= max_ref_age:
            retained[name] = ref
    return retained


def _ancestors(snapshots: Mapping[int, Snapshot], snapshot_id: int) -> Iterator[Snapshot]:
    current = snapshots.get(snapshot_id)
    while current is not None:
        yield current
        parent = current.parent_snapshot_id
        current = snapshots.get(parent) if parent is not None else None


def _branch_snapshots_to_retain(lineage: Sequence[Snapshot], older_than_ms: int, min_keep: int) -> set[int]:
    """Java's ``computeBranchSnapshotsToRetain``: the head's ancestors until both limits are passed."""
    kept: set[int] = set()
    for ancestor in lineage:
        if len(kept) < min_keep or ancestor.timestamp_ms >= older_than_ms:
            kept.add(ancestor.snapshot_id)
        else:
            break
    return kept


def _stage_expiry(table: Table, plan: ExpiryPlan) -> Transaction:
    """The transaction that removes the plan's refs and snapshots (not committed)."""
    from pyiceberg.table.update import RemovePartitionStatisticsUpdate
    from pyiceberg.table.update.snapshot import ExpireSnapshots, ManageSnapshots

    tx = table.transaction()
    if plan.refs:
        refs = ManageSnapshots(tx)
        for name in plan.refs:
            if table.metadata.refs[name].snapshot_ref_type.value == "branch":
                refs.remove_branch(name)
            else:
                refs.remove_tag(name)
        refs.commit()
    if plan.snapshot_ids:
        ExpireSnapshots(tx).by_ids(sorted(plan.snapshot_ids)).commit()
        # PyIceberg drops the statistics of removed snapshots but keeps their partition statistics; Java's
        # removeSnapshots drops both.
        stale = [
            RemovePartitionStatisticsUpdate.model_validate({"snapshot-id": p.snapshot_id})
            for p in tx.table_metadata.partition_statistics
            if p.snapshot_id in plan.snapshot_ids
        ]
        if stale:
            apply_updates(tx, tuple(stale))
    return tx


def expire_snapshots(
    table: Table,
    *,
    older_than: str | int | float | datetime.datetime | None = None,
    retain_last: int | None = None,
    snapshot_ids: Sequence[int] = (),
    cleanup: bool = True,
    dry_run: bool = False,
    max_concurrent_deletes: int = DEFAULT_MAX_CONCURRENT_DELETES,
    limits: ResourceLimits | None = None,
    now: datetime.datetime | None = None,
) -> ExpireSnapshotsResult:
    """Spark's ``expire_snapshots``: expire snapshots and refs, then delete the files they alone reached.

    :param older_than: snapshots older than this expire (a duration ago such as ``"5d"``, a timestamp,
        epoch milliseconds or a datetime); default now minus ``history.expire.max-snapshot-age-ms`` (5 days).
    :param retain_last: ancestors of each branch always kept; default
        ``history.expire.min-snapshots-to-keep`` (1).
    :param snapshot_ids: snapshots to expire regardless of age.
    :param cleanup: delete the files no longer reachable (Java's ``cleanExpiredFiles``); with ``False`` only
        the metadata changes.
    :param dry_run: commit nothing and delete nothing; the counts say what would be deleted.
    :param max_concurrent_deletes: parallel deletes.
    :param limits: the memory limit and spill directory of the reachable-set difference.
    :param now: the current time (for tests).
    :returns: ``iceberg-exec/expire-snapshots-result@1`` with Java's ``deleted_*_count`` columns,
        ``expired_snapshot_ids`` and ``removed_refs``.
    :raises ConfigurationError: for ``gc.enabled=false`` or bad arguments; the table is unchanged.
    :raises CommitConflictError: when concurrent commits kept winning.
    :raises CommitStateUnknownError: when the catalog's answer is unknown (no file is deleted).

    >>> import os, tempfile, time, pyarrow as pa
    >>> from pyiceberg.catalog.sql import SqlCatalog
    >>> workdir = tempfile.TemporaryDirectory()
    >>> catalog = SqlCatalog("demo", uri=f"sqlite:///{workdir.name}/c.db", warehouse=f"file://{workdir.name}")
    >>> catalog.create_namespace("ns")
    >>> table = catalog.create_table("ns.t", schema=pa.schema([("id", pa.int64())]))
    >>> for i in range(3):
    ...     table.append(pa.table({"id": [i]}))
    >>> result = expire_snapshots(table, older_than=int(time.time() * 1000) + 1000, retain_last=1)
    >>> result["expired_snapshot_count"], result["deleted_manifest_lists_count"]
    (2, 2)
    >>> len(table.metadata.snapshots)
    1
    >>> catalog.engine.dispose(); workdir.cleanup()
    """
    limits = limits or ResourceLimits()
    if max_concurrent_deletes < 1:
        raise ConfigurationError("max_concurrent_deletes must be >= 1")
    now = (now or datetime.datetime.now(datetime.timezone.utc)).astimezone(datetime.timezone.utc)
    older_than_ms = (
        int(parse_older_than(older_than, now).timestamp() * 1000) if older_than is not None else None
    )
    name = table_name(table)
    started = time.monotonic()
    table.refresh()
    plan, before, after = _expire_with_retries(
        table,
        name,
        dry_run,
        now_ms=int(now.timestamp() * 1000),
        older_than_ms=older_than_ms,
        retain_last=retain_last,
        snapshot_ids=snapshot_ids,
    )
    outcomes: Counter[tuple[RefKind, str]] = Counter()
    stats = None
    if cleanup and not plan.empty:
        outcomes, stats = _clean_up(table, before, after, dry_run, max_concurrent_deletes, limits)
    counts = _deleted_counts(outcomes)
    failed = sum(n for (_, outcome), n in outcomes.items() if outcome not in _NOT_FAILED)
    result: ExpireSnapshotsResult = {
        "schema": EXPIRE_SNAPSHOTS_RESULT,
        "table": name,
        "dry_run": dry_run,
        "cleanup": cleanup,
        "older_than": datetime.datetime.fromtimestamp(
            plan.older_than_ms / 1000, tz=datetime.timezone.utc
        ).isoformat(),
        "older_than_ms": plan.older_than_ms,
        "retain_last": plan.retain_last,
        "snapshot_ids": sorted(snapshot_ids),
        "expired_snapshot_ids": sorted(plan.snapshot_ids),
        "expired_snapshot_count": len(plan.snapshot_ids),
        "removed_refs": list(plan.refs),
        "retained_snapshot_count": len(after.snapshots),
        "metadata_location": None if dry_run else table.metadata_location,
        "deleted_data_files_count": counts["deleted_data_files_count"],
        "deleted_equality_delete_files_count": counts["deleted_equality_delete_files_count"],
        "deleted_manifest_files_count": counts["deleted_manifest_files_count"],
        "deleted_manifest_lists_count": counts["deleted_manifest_lists_count"],
        "deleted_position_delete_files_count": counts["deleted_position_delete_files_count"],
        "deleted_statistics_files_count": counts["deleted_statistics_files_count"],
        "failed_delete_count": failed,
        "kept_referenced_count": sum(n for (_, outcome), n in outcomes.items() if outcome == "referenced"),
        "peak_rss_bytes": stats.peak_rss_bytes if stats else 0,
        "spilled_bytes": stats.spilled_bytes if stats else 0,
        "elapsed_seconds": round(time.monotonic() - started, 3),
    }
    log.info(
        "%s: %s %d snapshot(s) and %d ref(s); %s %s file(s)%s",
        name,
        "would expire" if dry_run else "expired",
        len(plan.snapshot_ids),
        len(plan.refs),
        "would delete" if dry_run else "deleted",
        sum(counts.values()),
        f", {failed} failed" if failed else "",
    )
    return result


def _clean_up(
    table: Table,
    before: TableMetadata,
    after: TableMetadata,
    dry_run: bool,
    workers: int,
    limits: ResourceLimits,
) -> tuple[Counter[tuple[RefKind, str]], ExecutionStats]:
    """Delete the files ``before`` reaches and ``after`` does not, each chunk proven unreferenced by the
    metadata of its moment; the outcomes by kind, and the resources the reachable-set difference used."""
    outcomes: Counter[tuple[RefKind, str]] = Counter()
    with track_resources(limits) as (spill_dir, stats), datafusion_errors():
        candidates = _unreachable_files(table.io, before, after, limits, spill_dir)
        guard = None if dry_run else ReferenceGuard(table, after)
        outcomes.update(_delete(table.io, candidates, dry_run, workers, guard))
    return outcomes, stats


def _expire_with_retries(
    table: Table,
    name: str,
    dry_run: bool,
    *,
    now_ms: int,
    older_than_ms: int | None,
    retain_last: int | None,
    snapshot_ids: Sequence[int],
) -> tuple[ExpiryPlan, TableMetadata, TableMetadata]:
    """Plan the expiry on the current metadata and commit it, planning again after a conflict (up to
    ``commit.retry.num-retries`` times); return the plan and the metadata before and after it.

    In a dry run nothing is committed: "after" is the staged transaction's metadata.
    """
    retries = max(0, _int_property(table.metadata.properties, "commit.retry.num-retries", 4))
    attempt = 0
    while True:
        if attempt:
            table.refresh()
        before = table.metadata
        if not gc_enabled(before.properties):
            raise ConfigurationError(_GC_MESSAGE)
        plan = plan_expiry(
            before,
            now_ms=now_ms,
            older_than_ms=older_than_ms,
            retain_last=retain_last,
            snapshot_ids=snapshot_ids,
        )
        if plan.empty:
            log.info("%s: no snapshot or ref expires", name)
            return plan, before, before
        tx = _stage_expiry(table, plan)
        if dry_run:
            return plan, before, tx.table_metadata
        if _committed(tx, name, attempt, retries):
            return plan, before, table.refresh().metadata
        attempt += 1


def _committed(tx: Transaction, name: str, attempt: int, retries: int) -> bool:
    """Commit ``tx``; after a conflict, back off and return False (so the caller re-plans) unless it was
    the last attempt.

    :raises CommitConflictError: when the last attempt conflicted too.
    :raises CommitStateUnknownError: when the catalog's answer is unknown.
    """
    from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

    try:
        with v3_metadata_writer(tx):  # PyIceberg 0.12 cannot serialise v3 metadata
            tx.commit_transaction()
    except CommitFailedException as err:
        if attempt == retries:
            raise CommitConflictError(f"expiring snapshots of {name} kept conflicting: {err}") from err
        wait_ms = min(100 * 2**attempt, 60_000)
        log.warning("expiry of %s conflicted (%s); retrying in %d ms", name, err, wait_ms)
        time.sleep((wait_ms + random.uniform(0, wait_ms / 10)) / 1000)
        return False
    except CommitStateUnknownException as err:
        raise CommitStateUnknownError(
            f"the catalog did not confirm the expiry of {name}: {err}; check the table, then run again"
        ) from err
    return True


def _deleted_counts(outcomes: Mapping[tuple[RefKind, str], int]) -> dict[str, int]:
    """Java's ``deleted_*_count`` columns: the files deleted, by result counter."""
    counts = dict.fromkeys(sorted(set(_RESULT_NAMES.values())), 0)
    for (kind, outcome), number in outcomes.items():
        if outcome == "deleted":
            counts[_RESULT_NAMES[kind]] += number
    return counts


def _unreachable_files(
    io: FileIO, before: TableMetadata, after: TableMetadata, limits: ResourceLimits, spill_dir: str
) -> Iterator[tuple[str, RefKind]]:
    """Stream ``(uri, kind)`` of the files ``before`` reaches and ``after`` does not.

    Every manifest of both is read once; a file is retained when any manifest, snapshot or statistics
    entry of ``after`` reaches it, compared by the hash of its normalised path (a collision keeps a file).
    """
    retained_manifests = set(snapshot_manifests(io, after.snapshots))
    retained_ids = {s.snapshot_id for s in after.snapshots}
    retained_stats = {s.statistics_path for s in [*after.statistics, *after.partition_statistics]}
    refs_path = os.path.join(spill_dir, "reachable.parquet")
    seen: set[str] = set()
    with ReferenceStager(refs_path, PathNormalizer.of()) as stager:
        stage_table_references(
            stager,
            io,
            before,
            metadata_location=None,
            retained_manifests=retained_manifests,
            retained_snapshot_ids=retained_ids,
            retained_statistics=retained_stats,
            include_metadata_files=False,
            seen_manifests=seen,
        )
        # Manifests only ``after`` has (a commit that landed meanwhile) retain what they list.
        stage_table_references(
            stager,
            io,
            after,
            metadata_location=None,
            retained_manifests=retained_manifests,
            retained_snapshot_ids=retained_ids,
            retained_statistics=retained_stats,
            include_metadata_files=False,
            seen_manifests=seen,
        )
    # Keys of retained files build the hash join; candidates are deduplicated per bucket (an aggregation
    # holding their paths), so both are sized into buckets that fit the memory limit.
    candidates = stager.total - stager.retained
    buckets = max(
        bucket_count(stager.retained, _KEY_ROW_BYTES, limits),
        bucket_count(candidates, _DISTINCT_ROW_BYTES, limits),
    )
    ctx = staged_session(limits, spill_dir, {"refs": refs_path})
    query = (
        "SELECT c.uri, c.kind FROM (SELECT h FROM refs WHERE retained AND {bf}) r RIGHT ANTI JOIN "
        "(SELECT DISTINCT h, uri, kind FROM refs WHERE NOT retained AND {bf}) c ON r.h = c.h"
    )
    kinds = {kind.value: kind for kind in RefKind}
    for bucket in range(buckets):
        for batch in ctx.sql(query.format(bf=bucket_filter("h", bucket, buckets))).execute_stream():
            arrow = batch.to_pyarrow()
            for uri, kind in zip(arrow.column(0).to_pylist(), arrow.column(1).to_pylist(), strict=True):
                yield uri, kinds[kind]


def _unreferenced(
    candidates: list[tuple[str, RefKind]], guard: ReferenceGuard | None
) -> Generator[tuple[RefKind, str], None, list[tuple[str, RefKind]]]:
    """Yield a ``"referenced"`` outcome for each candidate the metadata of this moment references; return
    the others."""
    live = set() if guard is None else guard.referenced([uri for uri, _ in candidates])
    for uri, kind in candidates:
        if normalised_path(uri) in live:
            log.warning("keeping %s: a commit since the expiry references it", uri)
            yield kind, "referenced"
    return [item for item in candidates if normalised_path(item[0]) not in live]


def _delete(
    io: FileIO,
    files: Iterable[tuple[str, RefKind]],
    dry_run: bool,
    workers: int,
    guard: ReferenceGuard | None,
) -> Iterator[tuple[RefKind, str]]:
    """Delete ``files``, ``workers`` at a time (or in bulk where the FileIO can); yield each outcome.

    Before each chunk, ``guard`` proves its files still unreferenced by the metadata of that moment (a
    commit that landed after the expiry may reference one again): those are kept, as ``"referenced"``.
    """
    bulk = None if dry_run else bulk_remover(io)
    one = functools.partial(_delete_one, io, dry_run)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="iceberg-exec-expire") as pool:
        for candidates in _chunks(files, _DELETE_CHUNK):
            chunk = yield from _unreferenced(candidates, guard)
            if bulk is not None:
                try:
                    bulk([uri for uri, _ in chunk])
                except OSError as err:
                    log.warning("bulk delete failed (%s); deleting one by one", err)
                else:
                    yield from ((kind, "deleted") for _, kind in chunk)
                    continue
            yield from pool.map(one, chunk)


def _delete_one(io: FileIO, dry_run: bool, item: tuple[str, RefKind]) -> tuple[RefKind, str]:
    """Delete one file (or, in a dry run, count it); its outcome."""
    uri, kind = item
    if dry_run:
        return kind, "deleted"
    fs, path = filesystem_for(io, uri)
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        return kind, "missing"
    except OSError as err:
        log.warning("cannot delete %s: %s", uri, err)
        return kind, "failed"
    return kind, "deleted"


def _chunks(files: Iterable[tuple[str, RefKind]], size: int) -> Iterator[list[tuple[str, RefKind]]]:
    """``files`` in lists of ``size``, streamed."""
    chunk: list[tuple[str, RefKind]] = []
    for item in files:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk

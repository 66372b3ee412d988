"""The one rule for deleting a file a document named: only once it is proven unreferenced, at that moment.

Documents (results, payload references, orphan lists) travel through XCom, files and people, so what they
say is never what makes a deletion safe. Every deletion of a named file goes through
:func:`delete_unreferenced`, which, right before deleting:

1. refuses any path outside the table's own locations (its location, ``write.data.path`` and
   ``write.metadata.path`` of the *current* metadata, never a location a document claims);
2. refreshes the table and checks every candidate against the complete reference set of the current
   metadata (:func:`referenced_paths`): the live entries of every manifest of every snapshot (every branch
   and tag points at one of them), every manifest and manifest list, the metadata file, every
   ``metadata-log`` entry, ``version-hint.text``, and every statistics and partition-statistics file;
3. deletes the rest, one by one, counting what was missing or failed (cleanup is best effort: a file
   left behind is an orphan for the orphan scan, never a lost row).

Paths compare by their normalised path alone (:class:`~.reachable.PathNormalizer`), ignoring scheme and
authority, so a reference written as ``s3a://`` still protects an ``s3://`` candidate: erring towards
"referenced" can only spare a file, never delete a live one.

Files a writer created in this very process and never handed out (``RollingDataFileWriter.abort``, the
staging of a sort or join) are not named by any document and are removed directly by their owner.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.io.catalog import table_name
from airflow_provider_iceberg_exec.engine.io.payloads import STAGING_DIR
from airflow_provider_iceberg_exec.engine.meta.reachable import (
    PathNormalizer,
    iter_live_content_files,
    snapshot_manifests,
)

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata

__all__ = [
    "CleanupReport",
    "ReferenceGuard",
    "delete_unreferenced",
    "discard_payloads",
    "normalised_path",
    "referenced_paths",
    "table_roots",
    "under_roots",
    "uris_of",
]

log = logging.getLogger(__name__)

_LOCATION_PROPERTIES = ("write.data.path", "write.metadata.path", "write.object-storage.path")
_NORMALIZER = PathNormalizer.of()


@dataclass(frozen=True)
class CleanupReport:
    """What :func:`delete_unreferenced` did with each candidate.

    :param deleted: removed from storage.
    :param referenced: kept: the current metadata references them.
    :param outside: kept: they lie outside the table's locations.
    :param missing: already gone.
    :param failed: the delete failed (``"uri: reason"``); left for the orphan scan.
    :param unproven: kept: the table could not be read to prove them unreferenced (catalog or storage
        down); left for the orphan scan.
    """

    deleted: tuple[str, ...] = ()
    referenced: tuple[str, ...] = ()
    outside: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    unproven: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for a log or an error message.

        >>> CleanupReport(deleted=("a",), referenced=("b",)).describe()  # doctest: +NORMALIZE_WHITESPACE
        'deleted 1 file(s); kept 1 the table references, 0 outside its locations, 0 unproven;
         0 already gone, 0 failed'
        """
        return (
            f"deleted {len(self.deleted)} file(s); kept {len(self.referenced)} the table references, "
            f"{len(self.outside)} outside its locations, {len(self.unproven)} unproven; "
            f"{len(self.missing)} already gone, {len(self.failed)} failed"
        )


def _path(uri: str) -> str:
    return _NORMALIZER.split(uri)[2]


def table_roots(metadata: TableMetadata) -> list[str]:
    """The normalised directory prefixes (ending in ``/``) under which the table's files may live.

    >>> from types import SimpleNamespace
    >>> table_roots(SimpleNamespace(location="s3://b/wh/t", properties={"write.data.path": "s3://d/x/"}))
    ['/wh/t/', '/x/']
    """
    locations = [metadata.location, *(metadata.properties.get(k) for k in _LOCATION_PROPERTIES)]
    roots: list[str] = []
    for location in locations:
        if location and location.strip():
            root = _path(location.strip()).rstrip("/") + "/"
            if root != "/" and root not in roots:
                roots.append(root)
    return roots


def under_roots(uri: str, roots: Sequence[str]) -> bool:
    """Whether ``uri`` lies strictly below one of ``roots`` (no ``..`` segment allowed).

    >>> under_roots("s3://b/wh/t/data/a.parquet", ["/wh/t/"]), under_roots("/wh/t/../u/a", ["/wh/t/"])
    (True, False)
    >>> under_roots("/wh/tx/a.parquet", ["/wh/t/"])
    False
    """
    path = _path(uri)
    if "/../" in path or path.endswith("/..") or "/./" in path:
        return False
    return any(path.startswith(root) and len(path) > len(root) for root in roots)


def referenced_paths(
    io: FileIO,
    metadata: TableMetadata,
    metadata_location: str | None,
    candidates: Iterable[str],
    *,
    proven_manifests: Set[str] = frozenset(),
) -> set[str]:
    """The normalised paths among ``candidates`` that ``metadata`` references, by the complete set.

    Streams the live entries of every manifest of every snapshot once; memory holds the candidates and
    one manifest entry at a time, whatever the table's size.

    :param proven_manifests: manifests whose entries are known not to list any candidate (the caller
        proved it against metadata it read itself): manifests are immutable, so they are not read again.
    """
    wanted = {_path(uri) for uri in candidates}
    if not wanted:
        return set()
    others = [metadata_location or "", f"{metadata.location.rstrip('/')}/metadata/version-hint.text"]
    others += [entry.metadata_file for entry in metadata.metadata_log]
    others += [snapshot.manifest_list for snapshot in metadata.snapshots]
    others += [stats.statistics_path for stats in metadata.statistics]
    others += [stats.statistics_path for stats in metadata.partition_statistics]
    manifests = snapshot_manifests(io, metadata.snapshots)
    hits = wanted & {_path(uri) for uri in [*others, *manifests] if uri}
    for manifest_path, manifest in manifests.items():
        if manifest_path in proven_manifests:
            continue
        for file_path, _kind in iter_live_content_files(io, manifest):
            path = _path(file_path)
            if path in wanted:
                hits.add(path)
    return hits


class ReferenceGuard:
    """Re-proves, right before each batch of a long deletion, that its files are still unreferenced.

    For deletions whose candidates this process computed itself from metadata it read from the catalog
    (snapshot expiry: the files the expired snapshots reached and the new metadata does not): each check
    refreshes the table and reads only the manifests that metadata lacked, plus every non-manifest
    reference, which is the complete reference set for those candidates because manifests never change.

    :param table: the table.
    :param proven: the metadata the candidates were proven unreferenced against.
    """

    def __init__(self, table: Table, proven: TableMetadata) -> None:
        self.table = table
        self.proven_manifests = frozenset(snapshot_manifests(table.io, proven.snapshots))

    def referenced(self, uris: Sequence[str]) -> set[str]:
        """The normalised paths among ``uris`` that the table's metadata of this moment references."""
        table = self.table
        table.refresh()
        return referenced_paths(
            table.io,
            table.metadata,
            table.metadata_location,
            uris,
            proven_manifests=self.proven_manifests,
        )


def normalised_path(uri: str) -> str:
    """The path part of ``uri`` as the reference checks compare it.

    >>> normalised_path("s3a://bucket/wh//t/a.parquet")
    '/wh/t/a.parquet'
    """
    return _path(uri)


def delete_unreferenced(
    table: Table,
    uris: Iterable[str],
    *,
    what: str,
    roots: Sequence[str] | None = None,
    remove: Callable[[str], None] | None = None,
) -> CleanupReport:
    """Delete those of ``uris`` that lie under the table's locations and that its current metadata does
    not reference, checked right before deleting.

    .. code-block:: python

        report = delete_unreferenced(table, [f.file_path for f in added], what="uncommitted output")

    :param table: the table; refreshed first.
    :param uris: the candidates, as a document named them; duplicates are removed.
    :param what: what the candidates are, for the log (``"uncommitted output"``).
    :param roots: narrower normalised prefixes the candidates must lie under (for example the staging
        directory); each must itself lie under the table's locations. Default: :func:`table_roots`.
    :param remove: deletes one URI (default ``table.io.delete``); raises ``FileNotFoundError`` when gone.
    :returns: what was deleted and what was kept, and why.
    """
    candidates = list(dict.fromkeys(str(u) for u in uris if u))
    if not candidates:
        return CleanupReport()
    name = table_name(table)
    try:
        table.refresh()
        metadata = table.metadata
        allowed = table_roots(metadata)
        if roots is not None:
            allowed = [r for r in roots if any(r.startswith(root) for root in allowed)]
        outside = [uri for uri in candidates if not under_roots(uri, allowed)]
        inside = [uri for uri in candidates if uri not in outside]
        live = referenced_paths(table.io, metadata, table.metadata_location, inside)
    except Exception as err:
        # Unproven means kept: the files become orphans for the orphan scan, never a lost live file.
        log.warning(
            "%s: cannot prove %d file(s) unreferenced (%s: %s); keeping them (%s)",
            name,
            len(candidates),
            type(err).__name__,
            " ".join(str(err).split())[:300],
            what,
        )
        return CleanupReport(unproven=tuple(candidates))
    referenced = [uri for uri in inside if _path(uri) in live]
    deleted, missing, failed = _delete_each(
        [uri for uri in inside if _path(uri) not in live], remove or table.io.delete
    )
    report = CleanupReport(tuple(deleted), tuple(referenced), tuple(outside), tuple(missing), tuple(failed))
    for uri in referenced:
        log.warning("%s: keeping %s (%s): the table's current metadata references it", name, uri, what)
    for uri in outside:
        log.warning("%s: keeping %s (%s): it is outside the table's locations %s", name, uri, what, allowed)
    for line in failed:
        log.warning("%s: could not delete %s (%s); the orphan scan will find it", name, line, what)
    log.info("%s: %s: %s", name, what, report.describe())
    return report


def _delete_each(
    uris: Sequence[str], delete: Callable[[str], None]
) -> tuple[list[str], list[str], list[str]]:
    """Delete each of ``uris``; return those deleted, those already gone and the failures (``"uri: why"``)."""
    deleted: list[str] = []
    missing: list[str] = []
    failed: list[str] = []
    for uri in uris:
        try:
            delete(uri)
        except FileNotFoundError:
            missing.append(uri)
        except OSError as err:
            failed.append(f"{uri}: {' '.join(str(err).split()) or type(err).__name__}")
        else:
            deleted.append(uri)
    return deleted, missing, failed


def uris_of(files: Iterable[Mapping[str, object]]) -> list[str]:
    """The ``file-path`` of every DataFile JSON entry that has one (malformed entries are skipped).

    >>> uris_of([{"file-path": "s3://b/t/data/a.parquet"}, {"x": 1}, "junk"])
    ['s3://b/t/data/a.parquet']
    """
    return [
        str(f["file-path"]) for f in files if isinstance(f, Mapping) and isinstance(f.get("file-path"), str)
    ]


def discard_payloads(table: Table, uris: Iterable[str]) -> CleanupReport:
    """Delete staged payload files after their consumer is done with them.

    The URIs come from documents, so they go through the one safe-delete rule (:mod:`.cleanup`): only
    files under the table's staging directory that the table's current metadata does not reference.

    :returns: what was deleted and what was kept.
    """
    root = normalised_path(f"{table.location().rstrip('/')}/{STAGING_DIR}/")
    return delete_unreferenced(table, uris, what="staged payload", roots=[root.rstrip("/") + "/"])

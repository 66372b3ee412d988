"""Scanning a snapshot's manifests: the live data files that may match a filter, with the delete files
that apply to each of them by the spec's rules (sequence numbers, spec and partition)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile, ManifestEntry, ManifestFile
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

__all__ = [
    "ScannedDelete",
    "ScannedFile",
    "SnapshotFiles",
    "check_branch",
    "is_file_scoped",
    "parse_where",
    "scan_data_files",
    "scan_snapshot",
    "stream_data_files",
]

#: The ``file_path`` column of position delete files.
_FILE_PATH_FIELD_ID = 2147483546


@dataclass(frozen=True)
class ScannedDelete:
    """A live delete file and its data sequence number."""

    data_file: DataFile
    data_sequence_number: int


@dataclass(frozen=True)
class ScannedFile:
    """A live data file, its data sequence number, and the delete files that apply to it."""

    data_file: DataFile
    data_sequence_number: int
    delete_files: tuple[ScannedDelete, ...] = ()


@dataclass(frozen=True)
class SnapshotFiles:
    """What :func:`scan_snapshot` found.

    :param data_files: the live data files that may match the filter, by path, each with its deletes.
    :param delete_files: every live delete file of the snapshot, by path, whether or not it applies to
        any data file (the filter never prunes delete files).
    """

    data_files: tuple[ScannedFile, ...]
    delete_files: tuple[ScannedDelete, ...]


def check_branch(metadata: TableMetadata, branch: str, name: str) -> None:
    """Refuse a branch the table does not have, or a tag; ``main`` may be absent (no snapshot yet).

    :raises ConfigurationError: naming the table's branches.
    """
    from pyiceberg.table.refs import SnapshotRefType

    ref = metadata.refs.get(branch)
    if ref is None and branch != "main":
        known = sorted(n for n, r in metadata.refs.items() if r.snapshot_ref_type == SnapshotRefType.BRANCH)
        raise ConfigurationError(
            f"branch {branch!r} does not exist in {name}; its branches: {', '.join(known) or 'none yet'}"
        )
    if ref is not None and ref.snapshot_ref_type != SnapshotRefType.BRANCH:
        raise ConfigurationError(f"{branch} is a tag of {name}, not a branch")


def parse_where(where: str | None, schema: Schema) -> BooleanExpression:
    """Parse and bind a PyIceberg row filter, e.g. ``"id > 10 and region = 'eu'"``.

    :raises ConfigurationError: when the text does not parse or names an unknown column.

    >>> from pyiceberg.schema import Schema
    >>> from pyiceberg.types import LongType, NestedField
    >>> parse_where("id >", Schema(NestedField(1, "id", LongType())))
    Traceback (most recent call last):
    ...
    airflow_provider_iceberg_exec.engine.errors.ConfigurationError: cannot parse where 'id >'; use PyIceberg's filter syntax, e.g. "id > 10 and region = 'eu'"
    """  # noqa: E501
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.expressions.parser import parse
    from pyiceberg.expressions.visitors import bind

    if where is None or not where.strip():
        return AlwaysTrue()
    try:
        expression = parse(where)
    except Exception as err:  # pyparsing raises its own ParseException family
        raise ConfigurationError(
            f"cannot parse where {where!r}; use PyIceberg's filter syntax, e.g. \"id > 10 and region = 'eu'\""
        ) from err
    try:
        bind(schema, expression, case_sensitive=True)
    except ValueError as err:
        raise ConfigurationError(f"where {where!r} does not fit the table schema: {err}") from err
    return expression


def scan_data_files(table: Table, snapshot: Snapshot, row_filter: BooleanExpression) -> list[ScannedFile]:
    """The live data files of ``snapshot`` that may hold rows matching ``row_filter``, with their deletes.

    Data files are pruned by partition and column metrics (files that *may* match are kept, as Spark's
    ``ignoreResiduals`` scan does). Delete files are never pruned by the filter: a delete file's metrics
    describe delete keys, not the rows it removes.
    """
    return list(scan_snapshot(table.io, table.metadata, snapshot, row_filter).data_files)


def scan_snapshot(
    io: FileIO, metadata: TableMetadata, snapshot: Snapshot, row_filter: BooleanExpression | None = None
) -> SnapshotFiles:
    """The live data files of ``snapshot`` that may match ``row_filter`` (all when ``None``), each with the
    delete files that apply to it, and every live delete file of the snapshot.

    Which delete applies to which data file errs on the side of applying (see :func:`scan_data_files`),
    so a delete file that applies to none of the data files of an unfiltered scan is dangling.
    """
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.manifest import DataFileContent, ManifestContent
    from pyiceberg.table import ManifestGroupPlanner

    from airflow_provider_iceberg_exec.engine.meta.manifests import read_manifest_entries
    from airflow_provider_iceberg_exec.engine.meta.row_ids import read_manifest_list

    if row_filter is None:
        row_filter = AlwaysTrue()
    v3 = metadata.format_version >= 3
    # v3: the list in the v3 layout, so that data files get the first_row_id they inherit.
    manifests = read_manifest_list(io, snapshot) if v3 else snapshot.manifests(io)
    data_manifests = [m for m in manifests if m.content == ManifestContent.DATA]
    delete_manifests = [m for m in manifests if m.content == ManifestContent.DELETES]
    planner = ManifestGroupPlanner(metadata, io, row_filter)
    data_entries = [
        e
        for e in chain.from_iterable(planner.plan_manifest_entries(data_manifests))
        if e.data_file.content == DataFileContent.DATA
    ]
    if v3:
        data_entries = _with_first_row_ids(io, data_manifests, data_entries)
    # The engine's reader keeps referenced_data_file, which PyIceberg's v2 read schema drops.
    delete_entries = list(
        chain.from_iterable(read_manifest_entries(io, m, discard_deleted=True) for m in delete_manifests)
    )
    deletes = _DeleteIndex(
        delete_entries,
        unpartitioned_specs={sid for sid, spec in metadata.specs().items() if spec.is_unpartitioned()},
    )
    return SnapshotFiles(
        data_files=tuple(
            ScannedFile(
                data_file=e.data_file,
                data_sequence_number=_sequence(e),
                delete_files=deletes.for_data_file(e.data_file, _sequence(e)),
            )
            for e in sorted(data_entries, key=lambda e: e.data_file.file_path)
        ),
        delete_files=tuple(
            ScannedDelete(e.data_file, _sequence(e))
            for e in sorted(delete_entries, key=lambda e: e.data_file.file_path)
        ),
    )


def stream_data_files(
    io: FileIO, metadata: TableMetadata, snapshot: Snapshot, row_filter: BooleanExpression | None = None
) -> Iterator[ScannedFile]:
    """:func:`scan_snapshot`'s data files, streamed: one manifest at a time, in manifest-list order.

    The same files with the same deletes, pruned by the same partition and metrics tests as PyIceberg's
    ``ManifestGroupPlanner`` (which :func:`scan_snapshot` uses), but no list of the table's entries is
    built: a caller that keeps only a lean record of each file plans a table of hundreds of thousands of
    files in memory proportional to those records. The delete index is built first (delete manifests
    are read whole, as :func:`scan_snapshot` reads them). On v3 tables each data file carries the
    ``first_row_id`` it inherits, read in the same pass.
    """
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.manifest import DataFileContent, ManifestContent

    from airflow_provider_iceberg_exec.engine.meta.manifests import (
        iter_manifest_entries,
        read_manifest_entries,
    )
    from airflow_provider_iceberg_exec.engine.meta.row_ids import read_manifest_list

    if row_filter is None:
        row_filter = AlwaysTrue()
    manifests = read_manifest_list(io, snapshot) if metadata.format_version >= 3 else snapshot.manifests(io)
    delete_entries = chain.from_iterable(
        read_manifest_entries(io, m, discard_deleted=True)
        for m in manifests
        if m.content == ManifestContent.DELETES
    )
    deletes = _DeleteIndex(
        delete_entries,
        unpartitioned_specs={sid for sid, spec in metadata.specs().items() if spec.is_unpartitioned()},
    )
    filters = _EntryFilters(metadata, row_filter)
    for manifest in manifests:
        if manifest.content != ManifestContent.DATA or not filters.manifest_may_match(manifest):
            continue
        may_match = filters.file_may_match(manifest.partition_spec_id)
        for entry in iter_manifest_entries(io, manifest, discard_deleted=True):
            data_file = entry.data_file
            if data_file.content == DataFileContent.DATA and may_match(data_file):
                sequence = _sequence(entry)
                yield ScannedFile(data_file, sequence, deletes.for_data_file(data_file, sequence))


class _EntryFilters:
    """PyIceberg's scan pruning (``ManifestGroupPlanner``) from its public evaluators: manifests by their
    partition summaries, files by partition values and column metrics; built once per spec."""

    def __init__(self, metadata: TableMetadata, row_filter: BooleanExpression) -> None:
        from airflow_provider_iceberg_exec.engine.io.pyiceberg_internals import inclusive_metrics_evaluator

        self._metadata = metadata
        self._row_filter = row_filter
        self._metrics = inclusive_metrics_evaluator(metadata.schema(), row_filter)
        self._manifest_tests: dict[int, Callable[[ManifestFile], bool]] = {}
        self._file_tests: dict[int, Callable[[DataFile], bool]] = {}

    def _partition_filter(self, spec_id: int) -> BooleanExpression:
        from pyiceberg.expressions.visitors import inclusive_projection

        spec = self._metadata.specs()[spec_id]
        return inclusive_projection(self._metadata.schema(), spec, True)(self._row_filter)

    def manifest_may_match(self, manifest: ManifestFile) -> bool:
        from pyiceberg.expressions.visitors import manifest_evaluator

        spec_id = manifest.partition_spec_id
        if spec_id not in self._manifest_tests:
            spec, schema = self._metadata.specs()[spec_id], self._metadata.schema()
            self._manifest_tests[spec_id] = manifest_evaluator(
                spec, schema, self._partition_filter(spec_id), True
            )
        return bool(self._manifest_tests[spec_id](manifest))

    def file_may_match(self, spec_id: int) -> Callable[[DataFile], bool]:
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.expressions.visitors import expression_evaluator
        from pyiceberg.schema import Schema

        if spec_id not in self._file_tests:
            if self._row_filter == AlwaysTrue():
                # What both evaluators come to without a filter (include_empty_files=false), without
                # visiting anything: most compactions have no filter and this test runs per file.
                self._file_tests[spec_id] = lambda f: f.record_count != 0
                return self._file_tests[spec_id]
            spec = self._metadata.specs()[spec_id]
            partition_schema = Schema(*spec.partition_type(self._metadata.schema()).fields)
            in_partition = expression_evaluator(partition_schema, self._partition_filter(spec_id), True)
            metrics = self._metrics
            self._file_tests[spec_id] = lambda f: bool(in_partition(f.partition)) and metrics(f)
        return self._file_tests[spec_id]


def _with_first_row_ids(
    io: FileIO, data_manifests: Sequence[ManifestFile], entries: list[ManifestEntry]
) -> list[ManifestEntry]:
    """``entries`` (PyIceberg's v2 read, no ``first_row_id``) with the id each data file inherits.

    The ids come from a second read of the data manifests by our reader (each file's id depends on every
    entry before it, which PyIceberg's planner prunes): twice the manifest reading, on v3 tables only.
    """
    from airflow_provider_iceberg_exec.engine.meta.manifests import iter_manifest_entries, with_first_row_id
    from airflow_provider_iceberg_exec.engine.meta.row_ids import first_row_id

    ids = {
        entry.data_file.file_path: first_row_id(entry.data_file)
        for manifest in data_manifests
        for entry in iter_manifest_entries(io, manifest)
    }
    for entry in entries:
        entry.data_file = with_first_row_id(entry.data_file, ids.get(entry.data_file.file_path))
    return entries


def is_file_scoped(delete_file: DataFile) -> bool:
    """Whether a delete file can only apply to one data file (Java's ``ContentFileUtil.isFileScoped``).

    True for deletion vectors and position delete files with ``referenced_data_file`` set, and for
    position delete files whose ``file_path`` lower and upper bounds are equal. Never for equality
    deletes.

    :param delete_file: a delete file, ideally read by :func:`manifests.read_manifest_entries` (PyIceberg's
        own reader drops ``referenced_data_file``).
    """
    from pyiceberg.manifest import DataFileContent

    return delete_file.content == DataFileContent.POSITION_DELETES and _scoped_path(delete_file) is not None


def _sequence(entry: ManifestEntry) -> int:
    # v1 tables have no sequence numbers: everything is sequence 0.
    return entry.sequence_number if entry.sequence_number is not None else 0


class _DeleteIndex:
    """Which delete files apply to a data file (spec "Scan Planning"), erring on the side of applying."""

    def __init__(self, entries: Iterable[ManifestEntry], unpartitioned_specs: set[int]) -> None:
        from pyiceberg.manifest import DataFileContent

        #: position deletes of one data file (:func:`_scoped_path`), by partition and that file's path;
        #: looked up, not tested one by one (a table of 4,000 data files with a delete file each: 16M tests)
        self._scoped: dict[tuple[int, object, bytes], list[ScannedDelete]] = defaultdict(list)
        self._positional: dict[tuple[int, object], list[ScannedDelete]] = defaultdict(list)
        self._equality: dict[tuple[int, object], list[ScannedDelete]] = defaultdict(list)
        self._global_equality: list[ScannedDelete] = []
        for entry in entries:
            delete = ScannedDelete(entry.data_file, _sequence(entry))
            key = (entry.data_file.spec_id, _partition_key(entry.data_file))
            if entry.data_file.content == DataFileContent.POSITION_DELETES:
                path = _scoped_path(entry.data_file)
                if path is not None:
                    self._scoped[(*key, path)].append(delete)
                else:
                    self._positional[key].append(delete)
            elif entry.data_file.spec_id in unpartitioned_specs:
                self._global_equality.append(delete)
            else:
                self._equality[key].append(delete)

    def for_data_file(self, data_file: DataFile, sequence_number: int) -> tuple[ScannedDelete, ...]:
        if not (self._scoped or self._positional or self._equality or self._global_equality):
            return ()  # a table without deletes: asked once a data file (50,000 files: 0.1 s)
        key = (data_file.spec_id, _partition_key(data_file))
        applies = [
            d
            for d in self._scoped.get((*key, data_file.file_path.encode()), ())
            if d.data_sequence_number >= sequence_number
        ]
        applies += [
            d
            for d in self._positional.get(key, ())
            if d.data_sequence_number >= sequence_number and _may_reference(d.data_file, data_file.file_path)
        ]
        applies += [
            d
            for d in chain(self._equality.get(key, ()), self._global_equality)
            if d.data_sequence_number > sequence_number
        ]
        return tuple(sorted(applies, key=lambda d: d.data_file.file_path))


def _may_reference(delete_file: DataFile, path: str) -> bool:
    """Whether a position delete file may delete rows of the data file at ``path``.

    As Java's DeleteFileIndex: by ``referenced_data_file`` when set, else by the ``file_path`` column's
    bounds. Without this, a position delete was taken to apply to every data file of its partition.
    """
    from airflow_provider_iceberg_exec.engine.meta.manifests import referenced_data_file

    referenced = referenced_data_file(delete_file)
    if referenced is not None:
        return referenced == path
    encoded = path.encode()
    lower = (delete_file.lower_bounds or {}).get(_FILE_PATH_FIELD_ID)
    upper = (delete_file.upper_bounds or {}).get(_FILE_PATH_FIELD_ID)
    return (lower is None or lower <= encoded) and (upper is None or encoded <= upper)


def _scoped_path(delete_file: DataFile) -> bytes | None:
    """The one data file a position delete file may reference (encoded), as :func:`_may_reference` reads
    it: its ``referenced_data_file``, else its ``file_path`` column's bounds when equal; None otherwise."""
    from airflow_provider_iceberg_exec.engine.meta.manifests import referenced_data_file

    referenced = referenced_data_file(delete_file)
    if referenced is not None:
        return referenced.encode()
    lower = (delete_file.lower_bounds or {}).get(_FILE_PATH_FIELD_ID)
    upper = (delete_file.upper_bounds or {}).get(_FILE_PATH_FIELD_ID)
    return lower if lower is not None and lower == upper else None


def _partition_key(data_file: DataFile) -> object:
    partition = data_file.partition
    return tuple(partition[i] for i in range(len(partition)))

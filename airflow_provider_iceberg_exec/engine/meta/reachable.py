"""Every file a table's metadata references, staged as Parquet; rules the file-deleting operations share.

Orphan-file removal and snapshot expiry both compare file sets that can hold millions of paths. Neither
keeps them in a Python set: references are streamed into a local Parquet file (:class:`ReferenceStager`)
that DataFusion anti-joins under the memory limit.

What counts as referenced is Java's ``DeleteOrphanFilesSparkAction.validFileIdentDS`` (reference §3.1):

- the live entries (ADDED and EXISTING) of every manifest of every snapshot still in the metadata,
  branches and tags included: data files, position and equality delete files, and the Puffin files of
  deletion vectors (a DV entry's ``file_path`` is its Puffin file);
- every manifest and every manifest list;
- the current metadata file, every ``metadata-log`` entry and ``metadata/version-hint.text``;
- every statistics and partition-statistics file.

Paths are compared after normalisation to ``(scheme, authority, path)`` (:class:`PathNormalizer`), with
Java's ``equal_schemes`` (default ``s3a,s3n -> s3``) and ``equal_authorities``.
"""

from __future__ import annotations

import datetime
import enum
import hashlib
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq
    from datafusion import SessionContext
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import ManifestFile
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

__all__ = [
    "DEFAULT_EQUAL_SCHEMES",
    "GC_ENABLED",
    "REFERENCE_SCHEMA_FIELDS",
    "ROWS_PER_ROW_GROUP",
    "PathNormalizer",
    "RefKind",
    "ReferenceStager",
    "bucket_count",
    "bucket_filter",
    "bulk_remover",
    "filesystem_for",
    "gc_enabled",
    "iter_live_content_files",
    "parse_older_than",
    "path_hash",
    "snapshot_manifests",
    "stage_table_references",
    "staged_session",
]

log = logging.getLogger(__name__)

#: Java's ``equal_schemes`` default: ``map('s3a,s3n', 's3')``
DEFAULT_EQUAL_SCHEMES: Mapping[str, str] = {"s3a": "s3", "s3n": "s3"}
#: the table property that allows engines to delete the table's files (``TableProperties.GC_ENABLED``)
GC_ENABLED = "gc.enabled"
#: column names of a staged reference file, in order
REFERENCE_SCHEMA_FIELDS = ("uri", "scheme", "authority", "path", "h", "kind", "retained")

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):(.*)$", re.DOTALL)
_SLASHES_RE = re.compile(r"/{2,}")
#: rows per staged row group: a reader holds about one row group (a few MiB) at a time
ROWS_PER_ROW_GROUP = 16384
#: the share of the memory limit one hash-join build side or aggregation may take
_BUILD_SHARE = 0.25
_DELETED = 2  # ManifestEntryStatus.DELETED


class RefKind(str, enum.Enum):
    """Why a file is referenced; the categories of Java's valid-file set and of expiry's counts."""

    DATA = "data"
    POSITION_DELETES = "position_deletes"
    EQUALITY_DELETES = "equality_deletes"
    MANIFEST = "manifest"
    MANIFEST_LIST = "manifest_list"
    METADATA = "metadata"
    VERSION_HINT = "version_hint"
    STATISTICS = "statistics"
    PARTITION_STATISTICS = "partition_statistics"


_CONTENT_KINDS = {0: RefKind.DATA, 1: RefKind.POSITION_DELETES, 2: RefKind.EQUALITY_DELETES}


def _flatten(mapping: Mapping[str, str] | None, *, lower: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    for keys, value in (mapping or {}).items():
        target = value.strip().lower() if lower else value.strip()
        for key in str(keys).split(","):
            if key.strip():
                out[key.strip().lower() if lower else key.strip()] = target
    return out


@dataclass(frozen=True)
class PathNormalizer:
    """Split locations into ``(scheme, authority, path)`` the way Java's ``FileURI`` does.

    Keys may list several names separated by commas, as in Spark's ``map('s3a,s3n', 's3')``; user
    mappings are added to the defaults. Schemes compare case-insensitively; repeated slashes in the path
    collapse, as Hadoop's ``Path`` does.

    >>> PathNormalizer.of().split("s3a://bucket/wh/t/data/a.parquet")
    ('s3', 'bucket', '/wh/t/data/a.parquet')
    >>> PathNormalizer.of(equal_authorities={"nn1,nn2": "nn"}).split("hdfs://nn2/wh//t/x")
    ('hdfs', 'nn', '/wh/t/x')
    >>> PathNormalizer.of().split("/tmp/wh/t/x#1.parquet")
    ('', '', '/tmp/wh/t/x#1.parquet')
    """

    equal_schemes: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_EQUAL_SCHEMES))
    equal_authorities: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        equal_schemes: Mapping[str, str] | None = None,
        equal_authorities: Mapping[str, str] | None = None,
    ) -> PathNormalizer:
        """Build a normalizer from Spark-style maps (``{"s3a,s3n": "s3"}``), added to the defaults."""
        schemes = {**DEFAULT_EQUAL_SCHEMES, **_flatten(equal_schemes, lower=True)}
        return cls(schemes, _flatten(equal_authorities, lower=False))

    def split(self, uri: str) -> tuple[str, str, str]:
        """``(scheme, authority, path)`` of ``uri`` after the equal-scheme and equal-authority mappings."""
        match = _SCHEME_RE.match(uri)
        if match is None or len(match.group(1)) == 1:  # no scheme, or a Windows drive letter
            scheme, rest = "", uri
        else:
            scheme, rest = match.group(1).lower(), match.group(2)
        authority = ""
        if rest.startswith("//"):
            authority, slash, tail = rest[2:].partition("/")
            rest = slash + tail
        scheme = self.equal_schemes.get(scheme, scheme)
        authority = self.equal_authorities.get(authority, authority)
        return scheme, authority, _SLASHES_RE.sub("/", rest)

    def to_json(self) -> dict[str, dict[str, str]]:
        """The mappings, for a result document.

        >>> PathNormalizer.of().to_json()["equal_schemes"]
        {'s3a': 's3', 's3n': 's3'}
        """
        return {"equal_schemes": dict(self.equal_schemes), "equal_authorities": dict(self.equal_authorities)}


def gc_enabled(properties: Mapping[str, str]) -> bool:
    """Whether ``gc.enabled`` allows deleting files; Java's ``Boolean.parseBoolean``, default true.

    >>> gc_enabled({}), gc_enabled({"gc.enabled": "FALSE"}), gc_enabled({"gc.enabled": "no"})
    (True, False, False)
    """
    value = properties.get(GC_ENABLED)
    return True if value is None else str(value).strip().lower() == "true"


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d|w)\s*$", re.IGNORECASE)
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_older_than(
    value: str | int | float | datetime.datetime, now: datetime.datetime
) -> datetime.datetime:
    """Turn a duration ago or a point in time into an aware UTC datetime.

    :param value: a duration before ``now`` (``"3d"``, ``"72h"``, ``"90m"``, ``"3600s"``, ``"1w"``), an ISO
        timestamp (naive means UTC), epoch milliseconds, or a datetime.
    :param now: the reference time of durations.
    :raises ConfigurationError: when ``value`` is none of these.

    >>> now = datetime.datetime(2026, 1, 10, tzinfo=datetime.timezone.utc)
    >>> parse_older_than("3d", now).isoformat()
    '2026-01-07T00:00:00+00:00'
    >>> parse_older_than("2026-01-01T12:00:00", now).isoformat()
    '2026-01-01T12:00:00+00:00'
    >>> parse_older_than(1767225600000, now).isoformat()
    '2026-01-01T00:00:00+00:00'
    """
    if isinstance(value, datetime.datetime):
        moment = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        moment = datetime.datetime.fromtimestamp(value / 1000, tz=datetime.timezone.utc)
    else:
        text = str(value).strip()
        duration = _DURATION_RE.match(text)
        if duration:
            seconds = float(duration.group(1)) * _DURATION_UNITS[duration.group(2).lower()]
            return now - datetime.timedelta(seconds=seconds)
        if text.isdigit():
            return parse_older_than(int(text), now)
        try:
            moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ConfigurationError(
                f"older_than {text!r} is neither a duration (e.g. 3d, 72h, 90m) nor a timestamp "
                "(e.g. 2026-01-01T00:00:00Z) nor epoch milliseconds"
            ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.astimezone(datetime.timezone.utc)


def _entry_positions() -> tuple[int, int, int, int]:
    from pyiceberg.manifest import MANIFEST_ENTRY_SCHEMAS

    entry = MANIFEST_ENTRY_SCHEMAS[3].as_struct()
    names = [f.name for f in entry.fields]
    data_file = entry.field_by_name("data_file")
    assert data_file is not None
    file_names = [f.name for f in data_file.field_type.fields]  # type: ignore[attr-defined]
    return (
        names.index("status"),
        names.index("data_file"),
        file_names.index("content"),
        file_names.index("file_path"),
    )


def iter_live_content_files(io: FileIO, manifest: ManifestFile) -> Iterator[tuple[str, RefKind]]:
    """Stream ``(file_path, kind)`` of a manifest's live (ADDED and EXISTING) entries.

    Unlike :meth:`ManifestFile.fetch_manifest_entry`, entries are not collected in a list nor built into
    ``DataFile`` objects: one decoded record at a time, so a manifest of any entry count stays bounded by
    its own size.

    :param io: the table's FileIO.
    :param manifest: a manifest-list entry.
    """
    from pyiceberg.avro.file import AvroFile
    from pyiceberg.manifest import MANIFEST_ENTRY_SCHEMAS
    from pyiceberg.typedef import Record

    status_pos, file_pos, content_pos, path_pos = _entry_positions()
    with AvroFile[Record](io.new_input(manifest.manifest_path), MANIFEST_ENTRY_SCHEMAS[3]) as reader:
        for entry in reader:
            if entry[status_pos] == _DELETED:
                continue
            data_file = entry[file_pos]
            yield str(data_file[path_pos]), _CONTENT_KINDS.get(int(data_file[content_pos] or 0), RefKind.DATA)


def snapshot_manifests(io: FileIO, snapshots: Iterable[Snapshot]) -> dict[str, ManifestFile]:
    """Every manifest of ``snapshots``, by path (Java's ``ALL_MANIFESTS``, deduplicated by path).

    Holds one ``ManifestFile`` per distinct manifest, which is small beside the files they list.
    """
    manifests: dict[str, ManifestFile] = {}
    for snapshot in snapshots:
        for manifest in snapshot.manifests(io):
            manifests.setdefault(manifest.manifest_path, manifest)
    return manifests


def path_hash(path: str) -> int:
    """A 63-bit hash of a normalised path: the key the anti-joins match on.

    Joining on 8-byte keys keeps a hash join's build side small. Two different paths with the same hash
    make a listed file look referenced, so it is kept: a collision (about 1 in 10^7 for a million
    files against a million references) can only spare an orphan, never delete a referenced file.

    >>> path_hash("/wh/t/data/a.parquet") == path_hash("/wh/t/data/a.parquet")
    True
    >>> 0 <= path_hash("/x") < 2**63
    True
    """
    digest = hashlib.blake2b(path.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def bucket_count(rows: int, bytes_per_row: int, limits: ResourceLimits) -> int:
    """How many hash buckets keep one join's build side (or one aggregation) within its share of memory.

    Each bucket is one query over the rows whose ``h % buckets`` is the bucket number, so a hash join
    never builds more than a bucket's rows, whatever the number of files.

    >>> from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    >>> bucket_count(1_000_000, 48, ResourceLimits(memory_limit_bytes=256 << 20))
    1
    >>> bucket_count(100_000_000, 48, ResourceLimits(memory_limit_bytes=256 << 20))
    72
    """
    budget = max(1, int(limits.memory_limit_bytes * _BUILD_SHARE))
    return max(1, -(-rows * bytes_per_row // budget))


def bucket_filter(column: str, bucket: int, buckets: int) -> str:
    """The SQL predicate selecting one bucket of ``column`` (``TRUE`` when there is one bucket).

    >>> bucket_filter("r.h", 3, 8)
    'r.h % 8 = 3'
    """
    return "TRUE" if buckets == 1 else f"{column} % {buckets} = {bucket}"


def staged_session(limits: ResourceLimits, spill_dir: str, tables: Mapping[str, str]) -> SessionContext:
    """The bounded session with the staged Parquet files registered as tables.

    Staged files are small local files in row groups of :data:`ROWS_PER_ROW_GROUP` rows, which
    DataFusion's own Parquet reader scans in bounded memory: at a million rows a join peaked at 240-300
    MiB of RSS this way, against 400-530 MiB through a PyArrow dataset (``register_dataset``), whose
    scanner reads ahead (see docs/benchmarks.md, "Orphan scan"). ADR 0001's staging through a PyArrow
    dataset is about large data files, which this is not.
    """
    from airflow_provider_iceberg_exec.engine.io.session import build_session

    ctx = build_session(limits, spill_dir)
    for name, path in tables.items():
        ctx.register_parquet(name, path)
    return ctx


class ReferenceStager:
    """Write references into a local Parquet file, batch by batch, counting them per kind.

    Columns: ``uri`` (as written in the metadata), ``scheme``, ``authority`` and ``path`` (normalised),
    ``h`` (:func:`path_hash` of ``path``, the join key), ``kind`` (:class:`RefKind` value) and
    ``retained`` (for expiry: still reachable afterwards).
    """

    def __init__(self, path: str, normalizer: PathNormalizer) -> None:
        self.path = path
        self.normalizer = normalizer
        self.counts: dict[RefKind, int] = dict.fromkeys(RefKind, 0)
        self.retained = 0
        self._columns: dict[str, list[Any]] = {name: [] for name in REFERENCE_SCHEMA_FIELDS}
        self._writer: pq.ParquetWriter | None = None
        self._schema: pa.Schema | None = None

    def __enter__(self) -> ReferenceStager:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self._schema = pa.schema(
            [
                pa.field("uri", pa.string(), nullable=False),
                pa.field("scheme", pa.string(), nullable=False),
                pa.field("authority", pa.string(), nullable=False),
                pa.field("path", pa.string(), nullable=False),
                pa.field("h", pa.int64(), nullable=False),
                pa.field("kind", pa.string(), nullable=False),
                pa.field("retained", pa.bool_(), nullable=False),
            ]
        )
        self._writer = pq.ParquetWriter(self.path, self._schema, compression="lz4")
        return self

    def add(self, uri: str, kind: RefKind, retained: bool = False) -> None:
        """Stage one reference."""
        scheme, authority, path = self.normalizer.split(uri)
        columns = self._columns
        columns["uri"].append(uri)
        columns["scheme"].append(scheme)
        columns["authority"].append(authority)
        columns["path"].append(path)
        columns["h"].append(path_hash(path))
        columns["kind"].append(kind.value)
        columns["retained"].append(retained)
        self.counts[kind] += 1
        self.retained += retained
        if len(columns["uri"]) >= ROWS_PER_ROW_GROUP:
            self._flush()

    @property
    def total(self) -> int:
        """References staged so far."""
        return sum(self.counts.values())

    def _flush(self) -> None:
        import pyarrow as pa

        if not self._columns["uri"] or self._writer is None:
            return
        batch = pa.record_batch(
            [self._columns[name] for name in REFERENCE_SCHEMA_FIELDS], schema=self._schema
        )
        self._writer.write_batch(batch)
        for values in self._columns.values():
            values.clear()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is None:
                self._flush()
        finally:
            if self._writer is not None:
                self._writer.close()
                self._writer = None


def stage_table_references(
    stager: ReferenceStager,
    io: FileIO,
    metadata: TableMetadata,
    *,
    metadata_location: str | None,
    retained_manifests: set[str] | None = None,
    retained_snapshot_ids: set[int] | None = None,
    retained_statistics: set[str] | None = None,
    include_metadata_files: bool = True,
    seen_manifests: set[str] | None = None,
) -> None:
    """Stage every file ``metadata`` references (reference §3.1) into ``stager``.

    For orphan removal the ``retained_*`` arguments stay ``None`` and every reference is staged with
    ``retained = False``. Expiry stages the metadata from before the commit with ``retained`` telling
    whether the file's manifest, snapshot or statistics entry survives in the metadata after it.

    :param metadata_location: the current metadata file (``table.metadata_location``).
    :param retained_manifests: manifest paths still reachable afterwards (their entries are retained).
    :param retained_snapshot_ids: snapshots still present afterwards (their manifest lists are retained).
    :param retained_statistics: statistics and partition-statistics paths still present afterwards.
    :param include_metadata_files: also stage the metadata file, the metadata log and version-hint.text.
    :param seen_manifests: manifests already staged by an earlier call (they are skipped, then added).
    """
    seen = seen_manifests if seen_manifests is not None else set()
    manifests = snapshot_manifests(io, metadata.snapshots)
    for path, manifest in manifests.items():
        if path in seen:
            continue
        seen.add(path)
        keep = retained_manifests is not None and path in retained_manifests
        stager.add(path, RefKind.MANIFEST, keep)
        for file_path, kind in iter_live_content_files(io, manifest):
            stager.add(file_path, kind, keep)
    for snapshot in metadata.snapshots:
        keep = retained_snapshot_ids is not None and snapshot.snapshot_id in retained_snapshot_ids
        stager.add(snapshot.manifest_list, RefKind.MANIFEST_LIST, keep)
    for stats in metadata.statistics:
        keep = retained_statistics is not None and stats.statistics_path in retained_statistics
        stager.add(stats.statistics_path, RefKind.STATISTICS, keep)
    for partition_stats in metadata.partition_statistics:
        keep = retained_statistics is not None and partition_stats.statistics_path in retained_statistics
        stager.add(partition_stats.statistics_path, RefKind.PARTITION_STATISTICS, keep)
    if include_metadata_files:
        if metadata_location:
            stager.add(metadata_location, RefKind.METADATA, True)
        for entry in metadata.metadata_log:
            stager.add(entry.metadata_file, RefKind.METADATA, True)
        stager.add(f"{metadata.location.rstrip('/')}/metadata/version-hint.text", RefKind.VERSION_HINT, True)
    log.debug("staged %d references of %d manifest(s)", stager.total, len(manifests))


def filesystem_for(io: FileIO, uri: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow file system of ``uri`` through the table's FileIO, and the path of ``uri`` in it.

    PyArrowFileIO hands out its own file systems (with the catalog's credentials); FsspecFileIO's are
    wrapped with ``pyarrow.fs.FSSpecHandler``.

    :raises ConfigurationError: for another FileIO.
    """
    import pyarrow.fs as pafs
    from pyiceberg.io.pyarrow import PyArrowFileIO

    scheme, netloc, path = PyArrowFileIO.parse_location(uri)
    if isinstance(io, PyArrowFileIO):
        return io.fs_by_scheme(scheme, netloc), path
    try:
        from pyiceberg.io.fsspec import FsspecFileIO
    except ImportError:  # pragma: no cover
        FsspecFileIO = None  # type: ignore[assignment,misc]
    if FsspecFileIO is not None and isinstance(io, FsspecFileIO):
        return pafs.PyFileSystem(pafs.FSSpecHandler(io.get_fs(scheme))), path
    raise ConfigurationError(
        f"cannot list files through {type(io).__name__}; use PyArrowFileIO or FsspecFileIO"
    )


def bulk_remover(io: FileIO) -> Callable[[list[str]], None] | None:
    """A bulk delete for FileIOs whose file system has one (fsspec's ``rm`` with a list); else ``None``."""
    try:
        from pyiceberg.io.fsspec import FsspecFileIO
    except ImportError:  # pragma: no cover - fsspec is a dependency of pyiceberg
        return None
    if not isinstance(io, FsspecFileIO):
        return None

    def remove(uris: list[str]) -> None:
        by_scheme: dict[str, list[str]] = {}
        for uri in uris:
            scheme = PathNormalizer({}, {}).split(uri)[0] or "file"
            by_scheme.setdefault(scheme, []).append(uri)
        for scheme, group in by_scheme.items():
            io.get_fs(scheme).rm(group)

    return remove

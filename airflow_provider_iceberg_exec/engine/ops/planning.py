"""Pure, deterministic planning of compaction file groups with Spark's ``rewrite_data_files`` semantics.

The input is a list of already-scanned :class:`FileCandidate` objects; nothing here reads a catalog, a
manifest or a file. The pipeline follows Java Iceberg 1.10's ``BinPackRewriteFilePlanner`` and
``SizeBasedFileRewritePlanner``:

1. **Skip** files with delete files unless the caller can apply deletes (rewriting such a file without
   its deletes would resurrect deleted rows). They are reported in :attr:`PlanOutcome.skipped`.
2. **Bucket** by ``(spec_id, partition)``. A file whose spec is not the output spec goes into a single
   bucket with the empty partition ``()``, because "data inside could contain values which belong to
   multiple partitions in the current spec" (``groupByPartition``).
3. **File filter** (``filterFiles``): ``size < min-file-size-bytes or size > max-file-size-bytes`` or
   ``delete_file_count >= delete-file-threshold`` (``tooManyDeletes``) or a delete ratio of at least
   ``delete-ratio-threshold`` (``tooHighDeleteRatio``, see :func:`too_high_delete_ratio`).
   ``rewrite-all`` skips it.
4. **Bin-pack** each bucket (``BinPacking.ListPacker(max-file-group-size-bytes, lookback=1,
   largestBinFirst=false, max-file-group-input-files)``): next-fit in path order; a file that does not
   fit closes the open group. A file larger than the cap is a group of its own.
5. **Group filter** (``filterFileGroups``): ``enoughInputFiles or enoughContent or tooMuchContent or any
   tooManyDeletes or any tooHighDeleteRatio``. ``rewrite-all`` skips it.
6. **max-files-to-rewrite** (``plan()``): walk buckets and their groups in order and take files until
   the cap; the group that crosses the cap is cut to a prefix.
7. **Size each group**: :func:`expected_output_files` and the split size, from the files actually
   in the group (after a cut, as upstream since apache/iceberg#15576).
8. **Order** the groups by ``rewrite-job-order`` (a stable sort) and cut them into commit batches.

Deliberate differences from Java, all forced by determinism or by what a candidate carries:

- Java packs in manifest-scan order and iterates buckets in hash order. Here files are packed in path
  order and buckets run in :func:`_bucket_sort_key` order (spec id, then partition values with ``None``
  first), so equal inputs in any order give equal plans.
- Java tests a file's spec against the table's *current* spec. Here the test is against
  ``output_spec_id`` (Spark's ``output-spec-id`` option, which defaults to the current spec): a file
  written with another spec can only reach the output spec through repartitioning. The mixed bucket is
  labelled with ``current_spec_id`` and the empty partition, as Java keys it with an empty struct of the
  current spec's partition type. As in Java, when that spec is unpartitioned the mixed bucket and the
  current spec's own (empty-partition) bucket are the same bucket.
- NaN partition values are equal in bucket keys, as with Java's ``Double.equals`` (Python has
  ``nan != nan``).
- With partial progress, Java divides the plan's total group count (counted before
  ``max-files-to-rewrite``) by ``partial-progress.max-commits`` and commits groups as they finish; here
  the planned groups are divided and batched in job order.
- ``tooHighDeleteRatio`` needs the record counts of a file's file-scoped deletes, which the caller sums
  into :attr:`FileCandidate.file_scoped_deleted_records` (Java reads them from the scan task's deletes).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, time
from decimal import Decimal
from uuid import UUID

from airflow_provider_iceberg_exec.engine.config import CompactionOptions, RewriteJobOrder
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

__all__ = [
    "SPLIT_OVERHEAD_BYTES",
    "FileCandidate",
    "FileGroup",
    "PlanOutcome",
    "expected_output_files",
    "plan_file_groups",
    "too_high_delete_ratio",
    "write_max_file_size",
]

log = logging.getLogger(__name__)

#: Added to the estimated split size, as Java's ``SizeBasedFileRewritePlanner.SPLIT_OVERHEAD``.
SPLIT_OVERHEAD_BYTES = 5 * 1024

_UNPARTITIONED_TOKEN = "unpartitioned"


@dataclass(frozen=True, slots=True)  # slots: a plan holds one per live file (500,000 on large tables)
class FileCandidate:
    """One data file of the starting snapshot, as the scan saw it.

    :param path: the data file's location; unique among the candidates of one plan.
    :param size_bytes: ``file_size_in_bytes``.
    :param record_count: ``record_count``.
    :param spec_id: the partition spec the file was written with.
    :param partition: the file's partition values in its spec's field order; must be hashable.
    :param delete_file_count: how many delete files apply to the file.
    :param file_scoped_deleted_records: the sum of ``record_count`` over the file-scoped delete files
        that apply to the file: deletion vectors and position delete files whose
        ``referenced_data_file`` is set or whose ``file_path`` lower and upper bounds are equal (Java's
        ``ContentFileUtil.isFileScoped``). Other delete files do not count: how many of their rows hit
        this file is unknown without reading them.
    :param handle: the caller's own object (for example a pyiceberg ``DataFile`` and its deletes); never
        inspected, and left out of equality and hashing.
    :raises ConfigurationError: for a negative size, count or delete count, or an unhashable partition.
    """

    path: str
    size_bytes: int
    record_count: int
    spec_id: int
    partition: tuple[object, ...]
    delete_file_count: int = 0
    handle: object = field(default=None, compare=False, repr=False)
    file_scoped_deleted_records: int = 0

    def __post_init__(self) -> None:
        if self.size_bytes < 0:
            raise ConfigurationError(f"{self.path}: size_bytes must be >= 0, got {self.size_bytes}")
        if self.record_count < 0:
            raise ConfigurationError(f"{self.path}: record_count must be >= 0, got {self.record_count}")
        if self.delete_file_count < 0:
            raise ConfigurationError(
                f"{self.path}: delete_file_count must be >= 0, got {self.delete_file_count}"
            )
        if self.file_scoped_deleted_records < 0:
            raise ConfigurationError(
                f"{self.path}: file_scoped_deleted_records must be >= 0, "
                f"got {self.file_scoped_deleted_records}"
            )
        if not isinstance(self.partition, tuple):
            raise ConfigurationError(f"{self.path}: partition must be a tuple, got {self.partition!r}")
        try:
            hash(self.partition)
        except TypeError as err:
            raise ConfigurationError(f"{self.path}: partition must be hashable: {err}") from err


@dataclass(frozen=True)
class FileGroup:
    """A set of files of one bucket that one rewrite task turns into new files.

    :param group_id: deterministic and unique within a plan, made of ``[A-Za-z0-9_.-]`` only, so that it
        can name files and XCom keys: ``<spec_id>-<partition token>-<n>`` where the token is
        ``unpartitioned`` for the empty partition and a hash of the partition values otherwise, and
        ``n`` counts the bucket's groups from 1 in packing order.
    :param spec_id: the spec of the bucket: the files' spec, or the current spec id for the bucket of
        files written with another spec than the output spec.
    :param partition: the bucket's partition values; ``()`` for an unpartitioned spec or the mixed bucket.
    :param files: the input files, in packing (path) order.
    :param input_bytes: the sum of the files' sizes.
    :param expected_output_files: Java's ``expectedOutputFiles`` for ``input_bytes``.
    :param split_size_bytes: Java's ``inputSplitSize``, within ``[target, write_max_file_size]``.
    :param needs_repartition: whether any file's spec differs from the output spec, so the rows must be
        redistributed by the output spec's partitioning (Spark uses RANGE distribution then).
    """

    group_id: str
    spec_id: int
    partition: tuple[object, ...]
    files: tuple[FileCandidate, ...]
    input_bytes: int
    expected_output_files: int
    split_size_bytes: int
    needs_repartition: bool


@dataclass(frozen=True)
class PlanOutcome:
    """The result of :func:`plan_file_groups`.

    :param groups: the groups to rewrite, in ``rewrite-job-order``.
    :param skipped: ``(path, reason)`` for each file left out on purpose, sorted by path. Files that
        merely do not need a rewrite are not listed.
    :param commit_batches: the group ids of each commit, in group order: one batch with every group, or
        with ``partial-progress.enabled`` batches of ``ceil(len(groups) / partial-progress.max-commits)``
        groups. An empty plan has no batch.
    """

    groups: tuple[FileGroup, ...]
    skipped: tuple[tuple[str, str], ...]
    commit_batches: tuple[tuple[str, ...], ...]


def write_max_file_size(options: CompactionOptions) -> int:
    """The writer's file size cap: the target plus half the distance to ``max-file-size-bytes``.

    Java's ``writeMaxFileSize``, with the same double arithmetic and truncation.

    :param options: the compaction options.
    :returns: the size in bytes.

    >>> write_max_file_size(CompactionOptions(target_file_size_bytes=100, min_file_size_bytes=75,
    ...                                       max_file_size_bytes=181))
    140
    """
    target = options.target_file_size_bytes
    return int(target + (options.max_file_size_bytes - target) * 0.5)


def expected_output_files(input_bytes: int, options: CompactionOptions) -> int:
    """How many files a group of ``input_bytes`` should be written as (Java's ``expectedOutputFiles``).

    Below the target it is one file. Otherwise, a remainder ``input_bytes % target`` larger than
    ``min-file-size-bytes`` gets a file of its own; a smaller remainder is spread over the other files
    when their average stays below ``min(1.1 * target, write_max_file_size)``, and gets its own file
    when it does not.

    :param input_bytes: the group's total input size.
    :param options: the compaction options.
    :returns: the number of output files, at least 1.

    >>> options = CompactionOptions(target_file_size_bytes=100, min_file_size_bytes=75,
    ...                             max_file_size_bytes=180)
    >>> expected_output_files(1050, options)  # 10 files of 105 bytes
    10
    >>> expected_output_files(180, options)  # a remainder of 80 > 75 is a file of its own
    2
    """
    target = options.target_file_size_bytes
    if input_bytes < target:
        return 1
    with_remainder = -(-input_bytes // target)
    without_remainder = input_bytes // target
    average_without_remainder = input_bytes // without_remainder
    if input_bytes % target > options.min_file_size_bytes:
        return with_remainder
    if average_without_remainder < min(1.1 * target, float(write_max_file_size(options))):
        return without_remainder
    return with_remainder


def plan_file_groups(
    candidates: Sequence[FileCandidate],
    options: CompactionOptions,
    *,
    current_spec_id: int,
    output_spec_id: int,
    apply_deletes: bool = False,
    bucket_by_file_spec: bool = False,
) -> PlanOutcome:
    """Select files and bin-pack them into rewrite groups, as Spark's ``rewrite_data_files`` binpack.

    The result depends only on the set of candidates, not on their order.

    :param candidates: the data files of the starting snapshot that match the job's filter.
    :param options: the compaction options.
    :param current_spec_id: the table's current (default) spec id; labels the bucket of files written
        with another spec than the output spec.
    :param output_spec_id: the spec the new files are written with (``output-spec-id``, resolved to the
        current spec id when unset).
    :param apply_deletes: whether the rewrite applies delete files. When false, files with delete files
        are skipped: rewriting them without their deletes would bring deleted rows back.
    :param bucket_by_file_spec: bucket every file by its own ``(spec_id, partition)``, whatever the output
        spec (position delete files are rewritten in their own spec and partition: no mixed bucket and
        no repartitioning).
    :returns: the groups, the skipped files and the commit batches. An empty plan is a normal result.
    :raises ConfigurationError: when two candidates share a path, or when ``options.output_spec_id`` is
        set and differs from ``output_spec_id``.

    >>> options = CompactionOptions(target_file_size_bytes=100, min_file_size_bytes=75,
    ...                             max_file_size_bytes=180, min_input_files=2)
    >>> files = [FileCandidate(f"f{i}.parquet", 40, 10, 0, ()) for i in range(3)]
    >>> plan = plan_file_groups(files, options, current_spec_id=0, output_spec_id=0)
    >>> [(g.group_id, len(g.files), g.expected_output_files) for g in plan.groups]
    [('0-unpartitioned-1', 3, 2)]
    """
    if options.output_spec_id is not None and options.output_spec_id != output_spec_id:
        raise ConfigurationError(
            f"output-spec-id option is {options.output_spec_id} but output_spec_id={output_spec_id} was "
            "passed; resolve the option once and pass the same value"
        )
    ordered = sorted(candidates, key=lambda c: c.path)
    for previous, current in itertools.pairwise(ordered):
        if previous.path == current.path:
            raise ConfigurationError(f"data file {current.path!r} is listed twice among the candidates")

    eligible: list[FileCandidate] = []
    skipped: list[tuple[str, str]] = []
    for candidate in ordered:
        if not apply_deletes and candidate.delete_file_count > 0:
            skipped.append(
                (
                    candidate.path,
                    f"has {candidate.delete_file_count} delete file(s); applying deletes during rewrite "
                    "is not supported yet",
                )
            )
        else:
            eligible.append(candidate)

    bucket_spec_id = None if bucket_by_file_spec else output_spec_id
    buckets = _bucket(eligible, current_spec_id=current_spec_id, output_spec_id=bucket_spec_id)
    packed = [(key, _plan_bucket(files, options)) for key, files in buckets]
    selected = _cap_files(packed, options.max_files_to_rewrite)
    groups = _order(_build_groups(selected, options, bucket_spec_id), options.rewrite_job_order)
    batches = _commit_batches(groups, options)
    log.debug(
        "Planned %d group(s) of %d file(s) from %d candidate(s) in %d bucket(s); %d skipped",
        len(groups),
        sum(len(g.files) for g in groups),
        len(ordered),
        len(buckets),
        len(skipped),
    )
    return PlanOutcome(groups=groups, skipped=tuple(skipped), commit_batches=batches)


_BucketKey = tuple[int, tuple[object, ...]]


def _bucket(
    files: Iterable[FileCandidate], *, current_spec_id: int, output_spec_id: int | None
) -> list[tuple[_BucketKey, list[FileCandidate]]]:
    """Group files by ``(spec_id, partition)``; other specs than the output spec share one bucket
    (``output_spec_id=None``: every file keeps its own spec's bucket)."""
    by_key: dict[_BucketKey, tuple[_BucketKey, list[FileCandidate]]] = {}
    for file in files:
        if output_spec_id is None or file.spec_id == output_spec_id:
            key: _BucketKey = (file.spec_id, file.partition)
        else:
            key = (current_spec_id, ())
        # The first file (in path order) gives the bucket its partition values.
        by_key.setdefault(_canonical(key), (key, []))[1].append(file)
    # sorted() is stable: keys that compare equal keep their first-seen (path) order.
    return sorted(by_key.values(), key=lambda item: _bucket_sort_key(item[0]))


class _NaN:
    """Stands for every NaN partition value in bucket keys: Java's ``Double.equals`` has NaN == NaN."""

    def __repr__(self) -> str:
        return "NaN"


_NAN = _NaN()


def _canonical(key: _BucketKey) -> _BucketKey:
    """The bucket key with NaN values made equal to each other (in Python ``nan != nan``)."""
    spec_id, partition = key
    if not any(_is_nan(value) for value in partition):
        return key
    return spec_id, tuple(_NAN if _is_nan(value) else value for value in partition)


def _is_nan(value: object) -> bool:
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, Decimal):
        return value.is_nan()
    return False


def _bucket_sort_key(key: _BucketKey) -> tuple[int, tuple[tuple[int, str, tuple[int, object]], ...]]:
    """Order buckets by spec id, then partition values, ``None`` first, each type in its natural order."""
    spec_id, partition = key
    return spec_id, tuple(_value_sort_key(value) for value in partition)


def _value_sort_key(value: object) -> tuple[int, str, tuple[int, object]]:
    """A total order over partition values: ``None``, then by type name, then by value (or by repr)."""
    if value is None:
        return (0, "", (0, 0))
    kind = type(value).__name__
    if isinstance(value, bool | int | str | bytes):
        return (1, kind, (0, value))
    if isinstance(value, float | Decimal):
        return (1, kind, (1, repr(value)) if _is_nan(value) else (0, value))
    if isinstance(value, date | time):
        return (1, kind, (0, value.isoformat()))
    if isinstance(value, UUID):
        return (1, kind, (0, str(value)))
    return (1, kind, (1, repr(value)))


def _too_many_deletes(file: FileCandidate, options: CompactionOptions) -> bool:
    return file.delete_file_count >= options.delete_file_threshold


def too_high_delete_ratio(file: FileCandidate, options: CompactionOptions) -> bool:
    """Java's ``tooHighDeleteRatio``: do known deletes remove at least ``delete-ratio-threshold`` of the rows?

    The known deleted rows are :attr:`FileCandidate.file_scoped_deleted_records`, capped at the file's
    record count. A file without delete files, or without rows, never qualifies (in Java ``0 / 0`` is
    NaN, and NaN is not ``>=`` anything).

    :param file: the candidate.
    :param options: the compaction options (``delete_ratio_threshold``).
    :returns: whether the ratio reaches the threshold.

    >>> options = CompactionOptions()  # delete-ratio-threshold 0.3
    >>> too_high_delete_ratio(FileCandidate("f", 10, 10, 0, (), 1, file_scoped_deleted_records=3), options)
    True
    >>> too_high_delete_ratio(FileCandidate("f", 10, 10, 0, (), 1, file_scoped_deleted_records=2), options)
    False
    """
    if file.delete_file_count == 0 or file.record_count == 0:
        return False
    deleted = min(file.file_scoped_deleted_records, file.record_count)
    return deleted / file.record_count >= options.delete_ratio_threshold


def _file_needs_rewrite(file: FileCandidate, options: CompactionOptions) -> bool:
    """Java's ``filterFiles``: ``outsideDesiredFileSizeRange || tooManyDeletes || tooHighDeleteRatio``."""
    outside_range = (
        file.size_bytes < options.min_file_size_bytes or file.size_bytes > options.max_file_size_bytes
    )
    return outside_range or _too_many_deletes(file, options) or too_high_delete_ratio(file, options)


def _group_worth_rewriting(group: Sequence[FileCandidate], options: CompactionOptions) -> bool:
    """Java's ``filterFileGroups``."""
    count = len(group)
    size = sum(file.size_bytes for file in group)
    enough_input_files = count > 1 and count >= options.min_input_files
    enough_content = count > 1 and size > options.target_file_size_bytes
    too_much_content = size > options.max_file_size_bytes
    return (
        enough_input_files
        or enough_content
        or too_much_content
        or any(_too_many_deletes(file, options) for file in group)
        or any(too_high_delete_ratio(file, options) for file in group)
    )


def _pack(files: Iterable[FileCandidate], max_bytes: int, max_files: int) -> list[list[FileCandidate]]:
    """``BinPacking.ListPacker(max_bytes, lookback=1, largestBinFirst=false, max_files).pack``.

    With a look-back of one bin this is next-fit: a file that does not fit the open bin (by bytes or by
    count) closes it and opens a new one, which takes the file even when it alone exceeds the cap.
    """
    bins: list[list[FileCandidate]] = []
    open_bin: list[FileCandidate] = []
    open_bytes = 0
    for file in files:
        if open_bin and (open_bytes + file.size_bytes > max_bytes or len(open_bin) >= max_files):
            bins.append(open_bin)
            open_bin, open_bytes = [], 0
        open_bin.append(file)
        open_bytes += file.size_bytes
    if open_bin:
        bins.append(open_bin)
    return bins


def _plan_bucket(files: Sequence[FileCandidate], options: CompactionOptions) -> list[list[FileCandidate]]:
    """Java's ``planFileGroups(tasks)`` for one bucket: file filter, bin-pack, group filter."""
    if options.rewrite_all:
        return _pack(files, options.max_file_group_size_bytes, options.max_file_group_input_files)
    selected = [file for file in files if _file_needs_rewrite(file, options)]
    groups = _pack(selected, options.max_file_group_size_bytes, options.max_file_group_input_files)
    return [group for group in groups if _group_worth_rewriting(group, options)]


def _cap_files(
    packed: Sequence[tuple[_BucketKey, list[list[FileCandidate]]]], max_files: int | None
) -> list[tuple[_BucketKey, list[list[FileCandidate]]]]:
    """Apply ``max-files-to-rewrite``: take groups in bucket order until the cap, cutting the last one."""
    if max_files is None:
        return list(packed)
    remaining = max_files
    capped: list[tuple[_BucketKey, list[list[FileCandidate]]]] = []
    for key, groups in packed:
        kept: list[list[FileCandidate]] = []
        for group in groups:
            if remaining <= 0:
                break
            kept.append(group[:remaining])
            remaining -= len(kept[-1])
        capped.append((key, kept))
    return capped


def _split_size(input_bytes: int, options: CompactionOptions) -> int:
    """Java's ``inputSplitSize``: ``input / expectedOutputFiles + 5 KiB`` within ``[target, writeMax]``."""
    estimated = input_bytes // expected_output_files(input_bytes, options) + SPLIT_OVERHEAD_BYTES
    if estimated < options.target_file_size_bytes:
        return options.target_file_size_bytes
    return min(estimated, write_max_file_size(options))


def _partition_token(partition: tuple[object, ...]) -> str:
    if not partition:
        return _UNPARTITIONED_TOKEN
    digest = hashlib.sha256(repr(partition).encode("utf-8", "backslashreplace")).hexdigest()
    return digest[:16]


def _build_groups(
    selected: Sequence[tuple[_BucketKey, list[list[FileCandidate]]]],
    options: CompactionOptions,
    output_spec_id: int | None,
) -> list[FileGroup]:
    groups: list[FileGroup] = []
    used_prefixes: set[str] = set()
    for (spec_id, partition), bucket_groups in selected:
        if not bucket_groups:
            continue
        prefix = f"{spec_id}-{_partition_token(partition)}"
        if prefix in used_prefixes:  # distinct partitions with one repr (objects with a custom repr)
            suffix = 2
            while f"{prefix}.{suffix}" in used_prefixes:
                suffix += 1
            prefix = f"{prefix}.{suffix}"
        used_prefixes.add(prefix)
        for index, files in enumerate(bucket_groups, start=1):
            input_bytes = sum(file.size_bytes for file in files)
            groups.append(
                FileGroup(
                    group_id=f"{prefix}-{index}",
                    spec_id=spec_id,
                    partition=partition,
                    files=tuple(files),
                    input_bytes=input_bytes,
                    expected_output_files=expected_output_files(input_bytes, options),
                    split_size_bytes=_split_size(input_bytes, options),
                    needs_repartition=output_spec_id is not None
                    and any(file.spec_id != output_spec_id for file in files),
                )
            )
    return groups


def _order(groups: list[FileGroup], order: RewriteJobOrder) -> tuple[FileGroup, ...]:
    """Java's ``RewriteFileGroup.comparator``: a stable sort, so ties keep the bucket order."""
    if order is RewriteJobOrder.BYTES_ASC:
        return tuple(sorted(groups, key=lambda g: g.input_bytes))
    if order is RewriteJobOrder.BYTES_DESC:
        return tuple(sorted(groups, key=lambda g: -g.input_bytes))
    if order is RewriteJobOrder.FILES_ASC:
        return tuple(sorted(groups, key=lambda g: len(g.files)))
    if order is RewriteJobOrder.FILES_DESC:
        return tuple(sorted(groups, key=lambda g: -len(g.files)))
    return tuple(groups)


def _commit_batches(groups: Sequence[FileGroup], options: CompactionOptions) -> tuple[tuple[str, ...], ...]:
    ids = [group.group_id for group in groups]
    if not ids:
        return ()
    if not options.partial_progress_enabled:
        return (tuple(ids),)
    per_commit = -(-len(ids) // options.partial_progress_max_commits)
    return tuple(tuple(ids[start : start + per_commit]) for start in range(0, len(ids), per_commit))

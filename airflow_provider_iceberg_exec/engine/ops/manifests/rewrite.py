"""Rewrite the manifests of one spec at a branch head, in two streaming passes (the commit's planner).

For data and delete manifests separately (:func:`rewrite_at_head`), as Spark's action:

1. pass 1 streams the live entries of the chosen manifests and counts them per clustering key (the
   partition tuple, or the ``sort_by`` fields), so that memory holds one count per distinct key, never
   the entries;
2. the output count is ``ceil(total manifest bytes / target)``; range boundaries cut the sorted keys by
   cumulative count (Spark's ``repartitionByRange``); an unpartitioned spec is cut by entry position;
3. pass 2 streams the entries again and writes each, as EXISTING with its original snapshot id and data
   and file sequence numbers, to the writer of its range; a writer rolls over at 1.2 x target.

At most 32 writers are open at once (each holds an output buffer): a table with more output manifests
than that (over 256 MiB of manifests at the 8 MiB target) is read once more per 32 of them.
Within an output manifest entries keep their input order (Spark also sorts them; no reader relies on it).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.exceptions import ValidationException
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DATA_FILE_TYPE,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
)
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from airflow_provider_iceberg_exec.engine.commit.manifests import ManifestRewrite, OpenManifestWriter
from airflow_provider_iceberg_exec.engine.meta.manifests import iter_manifest_entries
from airflow_provider_iceberg_exec.engine.meta.row_ids import snapshot_manifests
from airflow_provider_iceberg_exec.engine.ops.manifests.plan import (
    SortKey,
    needs_rewrite,
    output_count,
    range_boundaries,
    range_of,
    roll_size,
    sort_key,
)

__all__ = ["RewriteSettings", "rewrite_at_head"]

#: output manifests written at once (see _rewrite_content)
_MAX_OPEN_WRITERS = 32
# data_file.partition (field 102) in the v3 record layout the entries are read into
_PARTITION_POS = next(i for i, f in enumerate(DATA_FILE_TYPE[3].fields) if f.field_id == 102)


@dataclass(frozen=True)
class RewriteSettings:
    """What to rewrite: the manifests of ``spec_id``, clustered by the partition fields at
    ``key_positions``."""

    spec_id: int
    #: positions in the spec's partition tuple of the clustering key; empty for an unpartitioned spec
    key_positions: tuple[int, ...]
    target_size_bytes: int


def rewrite_at_head(
    settings: RewriteSettings,
) -> Callable[[FileIO, TableMetadata, Snapshot, OpenManifestWriter], ManifestRewrite | None]:
    """The planner :func:`~airflow_provider_iceberg_exec.engine.commit.manifests.commit_manifest_rewrite`
    calls on every attempt."""

    def plan(
        io: FileIO, metadata: TableMetadata, head: Snapshot, open_writer: OpenManifestWriter
    ) -> ManifestRewrite | None:
        # v3: entries are read with the first_row_id they inherit and written as EXISTING with it
        manifests = snapshot_manifests(io, metadata, head)
        replaced: list[ManifestFile] = []
        created: list[ManifestFile] = []
        entries = 0
        for content in (ManifestContent.DATA, ManifestContent.DELETES):
            chosen = [
                m for m in manifests if m.content == content and m.partition_spec_id == settings.spec_id
            ]
            total_bytes = sum(int(m.manifest_length) for m in chosen)
            if not needs_rewrite(len(chosen), total_bytes, settings.target_size_bytes):
                continue
            written, count = _rewrite_content(io, chosen, content, open_writer, settings)
            replaced.extend(chosen)
            created.extend(written)
            entries += count
        return ManifestRewrite(replaced=replaced, created=created, entries=entries) if replaced else None

    return plan


def _rewrite_content(
    io: FileIO,
    manifests: Sequence[ManifestFile],
    content: ManifestContent,
    open_writer: OpenManifestWriter,
    settings: RewriteSettings,
) -> tuple[list[ManifestFile], int]:
    for manifest in manifests:
        if manifest.added_files_count is None or manifest.existing_files_count is None:
            raise ValidationException(f"No file counts in manifest: {manifest.manifest_path}")
    ranges = output_count(sum(int(m.manifest_length) for m in manifests), settings.target_size_bytes)
    positions = settings.key_positions
    counts: Counter[SortKey] = Counter(
        _key(entry, positions) for entry in _live_entries(io, manifests)
    )  # pass 1: one count per distinct key
    total = sum(counts.values())
    boundaries = range_boundaries(sorted(counts.items()), ranges) if positions else []
    counts.clear()
    written: list[ManifestFile] = []
    # Pass 2, once per window of ranges: every open writer holds an output buffer (1 MiB for local
    # files), so at most _MAX_OPEN_WRITERS are open; a table with more ranges is read again per window.
    for first in range(0, ranges, _MAX_OPEN_WRITERS):
        window = range(first, min(ranges, first + _MAX_OPEN_WRITERS))
        writers = _Writers(open_writer, content, settings.spec_id, roll_size(settings.target_size_bytes))
        with writers:
            for index, entry in enumerate(_live_entries(io, manifests)):
                target = (
                    range_of(_key(entry, positions), boundaries) if positions else index * ranges // total
                )
                if target in window:
                    writers.add(target, writers.existing(entry))
        written.extend(writers.written)
    return written, total


def _live_entries(io: FileIO, manifests: Sequence[ManifestFile]) -> Iterator[ManifestEntry]:
    for manifest in manifests:
        yield from iter_manifest_entries(io, manifest, discard_deleted=True)


def _key(entry: ManifestEntry, positions: tuple[int, ...]) -> SortKey:
    partition = entry.data_file.partition
    return sort_key([partition[pos] for pos in positions])


@dataclass
class _Writers:
    """The open output manifest of every range, each rolled over at ``roll_at`` bytes."""

    open_writer: OpenManifestWriter
    content: ManifestContent
    spec_id: int
    roll_at: int
    written: list[ManifestFile] = field(default_factory=list)
    _open: dict[int, ManifestWriter] = field(default_factory=dict)
    # PyIceberg's writer keeps every entry's partition until it closes: share one object per value
    _partitions: dict[tuple[Any, ...], Any] = field(default_factory=dict)

    def __enter__(self) -> _Writers:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc_type is not None:
            for writer in self._open.values():
                with contextlib.suppress(Exception):
                    writer.__exit__(exc_type, exc, tb)
            self._open.clear()
            return
        for index in sorted(self._open):
            self._close(index)

    def existing(self, entry: ManifestEntry) -> ManifestEntry:
        """``entry`` as EXISTING, with its snapshot id and both sequence numbers."""
        data_file = entry.data_file
        partition = data_file.partition
        data_file[_PARTITION_POS] = self._partitions.setdefault(
            tuple(partition[i] for i in range(len(partition))), partition
        )
        return ManifestEntry.from_args(
            status=ManifestEntryStatus.EXISTING,
            snapshot_id=entry.snapshot_id,
            sequence_number=entry.sequence_number,
            file_sequence_number=entry.file_sequence_number,
            data_file=data_file,
        )

    def add(self, index: int, entry: ManifestEntry) -> None:
        writer = self._open.get(index)
        if writer is None:
            writer = self._open[index] = self.open_writer(self.content, self.spec_id).__enter__()
        writer.add_entry(entry)
        if writer.tell() >= self.roll_at:
            self._close(index)

    def _close(self, index: int) -> None:
        writer = self._open.pop(index)
        writer.__exit__(None, None, None)
        self.written.append(writer.to_manifest_file())

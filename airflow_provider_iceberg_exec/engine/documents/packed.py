"""A task's entries packed column by column, for the one-call compaction that never serializes them.

A plan's task lists each input as a dict (``{"data-file": {...}, "data-sequence-number", "delete-files"}``,
about 650 bytes a file with its path). :func:`.compact` holds its plan, then each group's result, in one
process: a group of 500,000 small files held 320 MB of these dicts from the plan to the commit.
:class:`PackedEntries` holds each file's path, size and record count in columns and the rest (spec,
format, partition, split offsets, sequence number, deletes) once for all the files that share it, about
200 bytes a file. Every entry it hands out is a new dict equal to the one packed (its lists shared with
the entries of the same rest: nothing changes a plan's entries in place), so the documents' checks and
readers take it as they take a list; it is never written as JSON (``json.dumps`` refuses it).

An entry's delete files are held as their JSON text, decoded each time the entry is handed out, each text
once for all the entries that have it (an equality delete applies to every data file of its partition,
or of the table). Planning bench/mor.py's 200M-row table (4,000 data files, each with its own position
delete and the table's four equality deletes) grew the process by 72 MiB with the deletes as dicts
(16,000 copies of the four, and a position delete took about 4 KB), by 19 MiB as texts.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

__all__ = ["EntryPacker", "PackedDataFiles", "PackedEntries", "data_files_of", "is_packed"]

#: the data-file keys held in columns; the rest of a data file is shared
_COLUMNS = ("file-path", "file-size-in-bytes", "record-count")


class PackedEntries(Sequence[dict[str, Any]]):
    """Task entries held as columns; ``entries[i]`` is a new dict equal to the ``i``-th entry packed.

    >>> def entry(i):
    ...     file = {"content": "data", "file-path": f"f{i}", "file-size-in-bytes": 10 + i, "record-count": 2}
    ...     return {"data-file": file, "data-sequence-number": 3, "delete-files": []}
    >>> entries = [entry(i) for i in range(3)]
    >>> copies = [dict(e, **{"data-file": dict(e["data-file"])}) for e in entries]
    >>> packed = PackedEntries.pack(entries)
    >>> entries, list(packed) == copies, len(packed), packed.shapes
    ([], True, 3, 1)
    >>> packed[1:][0]["data-file"]["file-path"], list(data_files_of(packed[2:]))
    ('f1', [{'content': 'data', 'file-path': 'f2', 'file-size-in-bytes': 12, 'record-count': 2}])
    """

    __slots__ = ("_paths", "_records", "_shape_of", "_shapes", "_sizes")

    def __init__(
        self,
        paths: list[str],
        sizes: array[int],
        records: array[int],
        shape_of: array[int],
        shapes: list[tuple[dict[str, Any], dict[str, Any]]],
    ) -> None:
        self._paths, self._sizes, self._records, self._shape_of, self._shapes = (
            paths,
            sizes,
            records,
            shape_of,
            shapes,
        )

    @classmethod
    def pack(cls, entries: list[dict[str, Any]]) -> PackedEntries:
        """Pack ``entries``, emptying the list as it goes: each dict is let go once its columns hold it."""
        packer = EntryPacker()
        for pos, entry in enumerate(entries):
            packer.add(entry)
            entries[pos] = None  # type: ignore[call-overload]
        entries.clear()
        return packer.take(range(len(packer)))

    @property
    def shapes(self) -> int:
        """How many distinct rests the entries share."""
        return len(set(self._shape_of))

    def data_file(self, index: int) -> dict[str, Any]:
        """The ``data-file`` of entry ``index``, a new dict."""
        rest, _ = self._shapes[self._shape_of[index]]
        return {
            **rest,
            "file-path": self._paths[index],
            "file-size-in-bytes": self._sizes[index],
            "record-count": self._records[index],
        }

    def __len__(self) -> int:
        return len(self._paths)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> PackedEntries: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | PackedEntries:
        if isinstance(index, slice):
            return PackedEntries(
                self._paths[index],
                self._sizes[index],
                self._records[index],
                self._shape_of[index],
                self._shapes,
            )
        _, rest = self._shapes[self._shape_of[index]]
        entry = {**rest, "data-file": self.data_file(index)}
        deletes = rest.get("delete-files")
        if isinstance(deletes, _DeleteTexts):
            entry["delete-files"] = [json.loads(text) for text in deletes]
        return entry

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for index in range(len(self._paths)):
            yield self[index]

    def has_delete_files(self) -> bool:
        """Whether any entry lists a delete file, read off the shared rests (no entry is built)."""
        return any(self._shapes[shape][1].get("delete-files") for shape in set(self._shape_of))


class EntryPacker:
    """Packs task entries as a plan makes them, one :class:`PackedEntries` per task out of them.

    The entries are a plan's own (:func:`.plan_compaction`'s): each has a ``data-file`` with a string path
    and integer size and record count. The rest is shared by its ``repr``, which, unlike ``==``, tells
    ``True`` from ``1`` and ``1.0`` from ``1`` as JSON does; the entries handed out share its lists. Its
    delete files are held as JSON text, each text once (:class:`_DeleteTexts`), and a rest is known by the
    ``repr`` of its other parts, each ``repr`` held once, and its texts: the ``repr`` of a whole rest
    repeated its delete files' for each data file with a position delete of its own (15 MB while planning
    bench/mor.py's 200M-row table, about 3.7 KB a file).
    """

    def __init__(self) -> None:
        self._paths: list[str] = []
        self._sizes, self._records, self._shape_of = array("q"), array("q"), array("I")
        self._shapes: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self._known: dict[tuple[str, ...], int] = {}
        #: the JSON text of every delete file packed, itself
        self._texts: dict[str, str] = {}
        #: the ``repr`` of every part of a rest packed, itself
        self._reprs: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._paths)

    def add(self, entry: Mapping[str, Any]) -> int:
        """Pack one entry (it may go at once); return its number."""
        data_file = entry["data-file"]
        self._paths.append(data_file["file-path"])
        self._sizes.append(data_file["file-size-in-bytes"])
        self._records.append(data_file["record-count"])
        rest = {k: v for k, v in entry.items() if k != "data-file"}
        if rest.get("delete-files"):
            rest["delete-files"] = self._as_texts(rest["delete-files"])
        shape = ({k: v for k, v in data_file.items() if k not in _COLUMNS}, rest)
        number = self._known.setdefault(self._key(*shape), len(self._shapes))
        if number == len(self._shapes):
            self._shapes.append(shape)
        self._shape_of.append(number)
        return len(self._paths) - 1

    def _key(self, data_file: dict[str, Any], rest: dict[str, Any]) -> tuple[str, ...]:
        """What tells a rest from the others: the ``repr`` of its data file's part and of its other keys,
        each held once, then its delete files' texts (held once already)."""
        deletes = rest.get("delete-files")
        texts = deletes if isinstance(deletes, _DeleteTexts) else ()
        others = {k: v for k, v in rest.items() if k != "delete-files"} if texts else rest
        parts = (repr(data_file), repr(others))
        return (*(self._reprs.setdefault(part, part) for part in parts), *texts)

    def _as_texts(self, deletes: Any) -> Any:
        """An entry's ``delete-files`` as the JSON text of each, shared with the entries packed before: what
        a task read back from JSON gives. As they are when they are not a list of JSON values (the task's
        checks say what is wrong)."""
        if not isinstance(deletes, list):
            return deletes
        try:
            texts = [json.dumps(delete) for delete in deletes]
        except (TypeError, ValueError):
            return deletes
        return _DeleteTexts(self._texts.setdefault(text, text) for text in texts)

    def take(self, numbers: Iterable[int]) -> PackedEntries:
        """The entries ``numbers``, in that order."""
        paths: list[str] = []
        sizes, records, shape_of = array("q"), array("q"), array("I")
        for number in numbers:
            paths.append(self._paths[number])
            sizes.append(self._sizes[number])
            records.append(self._records[number])
            shape_of.append(self._shape_of[number])
        return PackedEntries(paths, sizes, records, shape_of, self._shapes)


class _DeleteTexts(tuple[str, ...]):
    """The JSON text of each of an entry's delete files (a tuple: its ``repr`` is not a list's)."""

    __slots__ = ()


class PackedDataFiles(Sequence[dict[str, Any]]):
    """The ``data-file`` of each of some :class:`PackedEntries`, each a new dict: a result's
    ``rewritten_data_files`` without a copy of every input."""

    __slots__ = ("_entries",)

    def __init__(self, entries: PackedEntries) -> None:
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> PackedDataFiles: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | PackedDataFiles:
        if isinstance(index, slice):
            return PackedDataFiles(self._entries[index])
        return self._entries.data_file(index)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for index in range(len(self._entries)):
            yield self._entries.data_file(index)

    def columns(self) -> Iterator[tuple[int, str, int, int]]:
        """Each data file as (the number of its shared rest, path, size, record count), without its dict:
        files of one number differ in nothing else."""
        entries = self._entries
        return zip(entries._shape_of, entries._paths, entries._sizes, entries._records, strict=True)


def data_files_of(entries: Sequence[Mapping[str, Any]]) -> Sequence[dict[str, Any]]:
    """The ``data-file`` of each task entry: a view of packed entries, else a list of them."""
    if isinstance(entries, PackedEntries):
        return PackedDataFiles(entries)
    return [entry["data-file"] for entry in entries]


def is_packed(value: Any) -> bool:
    """Whether ``value`` is a packed sequence, which the documents' checks take as a list."""
    return isinstance(value, PackedEntries | PackedDataFiles)

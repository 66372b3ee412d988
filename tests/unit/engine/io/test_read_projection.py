"""The per-schema projection cache and its relabelling fast path give exactly PyIceberg's projection,
file after file, for files of one schema and of evolved ones; tiny batches coalesce without a row moved;
tiny files read joined give the rows of the files read one by one."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io import FileIO, InputFile, InputStream, OutputFile
from pyiceberg.io.pyarrow import PyArrowFile, PyArrowFileIO, pyarrow_to_schema
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from airflow_provider_iceberg_exec.engine.errors import DataFileReadError
from airflow_provider_iceberg_exec.engine.io.pyiceberg_internals import batch_projection
from airflow_provider_iceberg_exec.engine.io.read import (
    ProjectionCache,
    _decode_tiny,
    coalesce_batches,
    iter_data_file_batches,
    read_files_joined,
)

TABLE = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "qty", LongType(), required=False),
)


def _field(name: str, kind: pa.DataType, field_id: int, nullable: bool = True) -> pa.Field:
    return pa.field(name, kind, nullable=nullable, metadata={b"PARQUET:field_id": str(field_id).encode()})


def _write(path: Path, schema: pa.Schema, rows: int, start: int) -> DataFile:
    columns = []
    for field in schema:
        if pa.types.is_string(field.type):
            columns.append(pa.array([None if i % 7 == 0 else f"n{i}" for i in range(start, start + rows)]))
        else:
            columns.append(pa.array(range(start, start + rows), field.type))
    pq.write_table(pa.Table.from_arrays(columns, schema=schema), path)
    return _data_file(str(path), rows, path.stat().st_size)


def _data_file(location: str, rows: int, size: int) -> DataFile:
    """An unpartitioned data file's entry at ``location``."""
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=rows,
        file_size_in_bytes=size,
        spec_id=0,
    )


def _claiming(
    written: DataFile, *, spec_id: int = 0, partition: Record | None = None, **claims: int
) -> DataFile:
    """``written`` with its partition, spec and manifest claims (size, record count) replaced."""
    data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=written.file_path,
        file_format=FileFormat.PARQUET,
        partition=partition if partition is not None else Record(),
        record_count=claims.get("record_count", written.record_count),
        file_size_in_bytes=claims.get("file_size_in_bytes", written.file_size_in_bytes),
    )
    data_file.spec_id = spec_id  # not a field of the entry: PyIceberg's readers set it this way
    return data_file


def _read(
    data_file: DataFile,
    *,
    batch_size: int = 4,
    cache: ProjectionCache | None = None,
    spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
    table: Schema = TABLE,
) -> list[pa.RecordBatch]:
    """``data_file``'s batches as the stream reads it alone."""
    return list(
        iter_data_file_batches(
            PyArrowFileIO(),
            data_file,
            table_schema=table,
            spec=spec,
            name_mapping=None,
            format_version=2,
            batch_size=batch_size,
            cache=cache,
        )
    )


def _reference(data_file: DataFile) -> list[pa.RecordBatch]:
    """PyIceberg's projection of every batch, built afresh for the file (no cache, no fast path)."""
    parquet = pq.ParquetFile(data_file.file_path)
    file_schema = pyarrow_to_schema(
        parquet.schema_arrow, None, downcast_ns_timestamp_to_us=True, format_version=2
    )
    project = batch_projection(TABLE, file_schema, format_version=2, missing_values={})
    return [project(b) for b in parquet.iter_batches(batch_size=4)]


def _joined(files: list[DataFile], table: Schema) -> list[pa.RecordBatch]:
    """``files`` read joined, unpartitioned, through PyArrow's FileIO."""
    return read_files_joined(
        PyArrowFileIO(),
        files,
        table_schema=table,
        specs={0: UNPARTITIONED_PARTITION_SPEC},
        name_mapping=None,
        format_version=2,
        batch_size=64,
        cache=ProjectionCache(),
    )


SAME = pa.schema(
    [_field("id", pa.int64(), 1, False), _field("name", pa.string(), 2), _field("qty", pa.int64(), 3)]
)
#: renamed, promoted (int -> long) and missing columns: never the fast path, still PyIceberg's result
EVOLVED = pa.schema(
    [_field("id", pa.int64(), 1, False), _field("label", pa.string(), 2), _field("q", pa.int32(), 3)]
)
MISSING = pa.schema([_field("id", pa.int64(), 1, False), _field("name", pa.string(), 2)])
#: the table's columns in another order: the relabelling fast path, but not the identity
REORDERED = pa.schema(
    [_field("qty", pa.int64(), 3), _field("id", pa.int64(), 1, False), _field("name", pa.string(), 2)]
)


@pytest.mark.parametrize(
    "layouts",
    [[SAME] * 4, [SAME, EVOLVED, SAME, MISSING, EVOLVED, SAME], [SAME, REORDERED, SAME, EVOLVED, REORDERED]],
)
def test_cached_reads_equal_pyiceberg_projection(tmp_path: Path, layouts: list[pa.Schema]) -> None:
    files = [_write(tmp_path / f"f{i}.parquet", s, 10, 10 * i) for i, s in enumerate(layouts)]
    cache = ProjectionCache()
    for data_file in files:
        got = _read(data_file, cache=cache)
        expected = _reference(data_file)
        assert len(got) == len(expected) == 3
        for batch, reference in zip(got, expected, strict=True):
            assert batch.equals(reference)
            assert batch.schema.equals(reference.schema, check_metadata=True)


def test_fast_path_is_taken_for_a_plain_file_and_not_for_a_promoted_one(tmp_path: Path) -> None:
    cache = ProjectionCache()
    for name, schema in (("same", SAME), ("evolved", EVOLVED)):
        data_file = _write(tmp_path / f"{name}.parquet", schema, 10, 0)
        _read(data_file, cache=cache)
    projections = list(cache._projections.values())
    assert [p._target is not None for p in projections] == [True, False]


def test_identity_only_where_the_files_columns_already_are_the_tables(tmp_path: Path) -> None:
    """A file whose columns are the projection's (names, order, types, field ids) is passed through as
    read; one with the same columns in another order is relabelled; both equal PyIceberg's result."""
    cache = ProjectionCache()
    for name, schema in (("same", SAME), ("reordered", REORDERED)):
        data_file = _write(tmp_path / f"{name}.parquet", schema, 10, 0)
        got = _read(data_file, cache=cache)
        for batch, reference in zip(got, _reference(data_file), strict=True):
            assert batch.equals(reference)
            assert batch.schema.equals(reference.schema, check_metadata=True)
    projections = list(cache._projections.values())
    assert [(p._target is not None, p._identity) for p in projections] == [(True, True), (True, False)]


@pytest.mark.parametrize("claim", [9, 11])
def test_a_file_whose_rows_differ_from_its_manifest_fails(tmp_path: Path, claim: int) -> None:
    """The rows read are checked against the manifest's record_count, read whole or streamed alike."""
    written = _write(tmp_path / "f.parquet", SAME, rows=10, start=0)
    data_file = _claiming(written, record_count=claim)
    with pytest.raises(DataFileReadError, match=f"holds 10 rows but its manifest entry says {claim}"):
        _read(data_file)


def test_coalesce_keeps_rows_and_order_and_passes_large_batches() -> None:
    schema = pa.schema([pa.field("x", pa.int64())])
    sizes = [3, 3, 3, 20, 1, 2, 9, 4]
    batches, start = [], 0
    for size in sizes:
        batches.append(pa.record_batch([pa.array(range(start, start + size), pa.int64())], schema=schema))
        start += size
    out = list(coalesce_batches(iter(batches), min_rows=8))
    assert [v for b in out for v in b.column(0).to_pylist()] == list(range(start))
    assert [b.num_rows for b in out] == [9, 20, 3, 9, 4]
    assert list(coalesce_batches(iter([]), min_rows=8)) == []


@pytest.mark.parametrize("claimed", ["exact", "understated", "overstated"])
def test_a_small_file_read_whole_gives_the_streamed_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, claimed: str
) -> None:
    """A file up to SMALL_FILE_BYTES is read in one request; a manifest that understates the size of a
    larger file does not truncate it: the file is streamed after all."""
    import airflow_provider_iceberg_exec.engine.io.read as read_module

    data_file = _write(tmp_path / "f.parquet", SAME, rows=500, start=0)
    size = data_file.file_size_in_bytes
    if claimed == "understated":
        monkeypatch.setattr(read_module, "SMALL_FILE_BYTES", size // 2)
        data_file = _claiming(data_file, file_size_in_bytes=size // 4)
    elif claimed == "overstated":  # the file is read whole all the same
        data_file = _claiming(data_file, file_size_in_bytes=size * 2)
    got = _read(data_file, batch_size=64)
    assert pa.Table.from_batches(got).equals(pa.Table.from_batches(_reference(data_file)))


def test_files_of_one_schema_in_other_partitions_get_their_own_fill_values(tmp_path: Path) -> None:
    """A column a file lacks but an identity partition fixes is filled from that file's partition, even
    when the file before it had the same schema (the cache's last-file shortcut must not reuse it)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    spec = PartitionSpec(PartitionField(3, 1000, IdentityTransform(), "qty"), spec_id=1)
    cache = ProjectionCache()
    got = []
    for number, qty in enumerate((7, 7, 9, 7)):
        written = _write(tmp_path / f"f{number}.parquet", MISSING, rows=3, start=number * 3)
        data_file = _claiming(written, spec_id=1, partition=Record(qty))
        batches = _read(data_file, batch_size=64, cache=cache, spec=spec)
        got.append(pa.Table.from_batches(batches).column("qty").to_pylist())
    assert got == [[7] * 3, [7] * 3, [9] * 3, [7] * 3]


class _OtherFileIO(FileIO):
    """A FileIO other than PyArrow's (a remote store's, say): its tiny files are fetched in one request."""

    def __init__(self) -> None:
        super().__init__()
        self._io = PyArrowFileIO()

    def new_input(self, location: str) -> InputFile:
        return self._io.new_input(location)

    def new_output(self, location: str) -> OutputFile:
        return self._io.new_output(location)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        self._io.delete(location)


class _PythonStreamFile(PyArrowFile):
    def open(self, seekable: bool = True) -> InputStream:
        return cast(InputStream, open(self._path, "rb"))  # the caller closes it


class _PythonStreamFileIO(PyArrowFileIO):
    """PyArrow's FileIO whose files open as Python streams (a subclass may): read whole, as a remote one's."""

    def new_input(self, location: str) -> PyArrowFile:
        scheme, netloc, path = self.parse_location(location, self.properties)
        return _PythonStreamFile(fs=self.fs_by_scheme(scheme, netloc), location=location, path=path)


@pytest.mark.parametrize("route", ["local", "fetched", "python-stream"])
def test_files_read_joined_give_the_rows_of_each_file_read_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    """Tiny files are joined only across files of one schema, spec and partition fill: evolved, reordered
    and partition-filled files keep their own projection; a file larger than its claim and one over the
    tiny size are streamed in their place. Local files are decoded from the open file, others from their
    bytes fetched whole."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    import airflow_provider_iceberg_exec.engine.io.read as read_module

    sources: list[str] = []
    decode_tiny = read_module._decode_tiny

    def decode(source: pa.NativeFile, *args: Any) -> Any:
        sources.append("fetched" if isinstance(source, pa.BufferReader) else "local")
        return decode_tiny(source, *args)

    monkeypatch.setattr(read_module, "_decode_tiny", decode)
    opened: list[str] = []
    open_file = read_module._open

    def counted_open(io: Any, path: str) -> Any:
        opened.append(path)
        return open_file(io, path)

    monkeypatch.setattr(read_module, "_open", counted_open)
    open_local = read_module._LocalOpener.open

    def counted_local(opener: Any, path: str) -> Any:
        stream = open_local(opener, path)
        if stream is not None:
            opened.append(path)
        return stream

    monkeypatch.setattr(read_module._LocalOpener, "open", counted_local)

    partitioned = PartitionSpec(PartitionField(3, 1000, IdentityTransform(), "qty"), spec_id=1)
    specs = {0: UNPARTITIONED_PARTITION_SPEC, 1: partitioned}
    layouts = [SAME, SAME, SAME, EVOLVED, REORDERED, REORDERED, SAME, "understated", "large", SAME]
    layouts += [("filled", 7), ("filled", 7), ("filled", 9), SAME]
    files = []
    for number, layout in enumerate(layouts):
        path = tmp_path / f"f{number}.parquet"
        if isinstance(layout, tuple):
            written = _write(path, MISSING, rows=5, start=number * 100)
            files.append(_claiming(written, spec_id=1, partition=Record(layout[1])))
        elif layout == "understated":
            written = _write(path, SAME, rows=5, start=number * 100)
            files.append(_claiming(written, file_size_in_bytes=written.file_size_in_bytes // 2))
        elif layout == "large":
            files.append(_claiming(_write(path, SAME, rows=5000, start=number * 100)))
        else:
            files.append(_claiming(_write(path, layout, rows=5, start=number * 100)))
    # The "large" file is over the tiny size: streamed, not joined.
    monkeypatch.setattr(read_module, "TINY_FILE_BYTES", files[layouts.index("large")].file_size_in_bytes - 1)

    joined = read_files_joined(
        {"local": PyArrowFileIO, "fetched": _OtherFileIO, "python-stream": _PythonStreamFileIO}[route](),
        files,
        table_schema=TABLE,
        specs=specs,
        name_mapping=None,
        format_version=2,
        batch_size=64,
        cache=ProjectionCache(),
    )
    # Every tiny file but the understated one (streamed) decoded by the route's reader, opened once.
    assert sources == ["local" if route == "local" else "fetched"] * (len(files) - 2)
    tiny = [
        f.file_path
        for f, layout in zip(files, layouts, strict=True)
        if layout not in ("understated", "large")
    ]
    assert sorted(path for path in opened if path in tiny) == sorted(tiny)
    alone = [
        batch
        for data_file in files
        for batch in _read(data_file, batch_size=64, spec=specs[data_file.spec_id])
    ]
    assert pa.Table.from_batches(joined).equals(pa.Table.from_batches(alone))
    for batch in joined:
        assert batch.schema.equals(alone[0].schema, check_metadata=True)
    # Joined where they may be: the first three files are one batch, the filled ones by their partition.
    assert joined[0].num_rows == 15
    assert len(joined) < len(alone)
    assert [
        b.column("qty").to_pylist() for b in joined if b.num_rows and b.column("qty")[0].as_py() in (7, 9)
    ] == [
        [7] * 10,
        [9] * 5,
    ]


def test_a_file_read_joined_whose_rows_differ_from_its_manifest_fails(tmp_path: Path) -> None:
    good = _claiming(_write(tmp_path / "good.parquet", SAME, rows=10, start=0))
    bad = _claiming(_write(tmp_path / "bad.parquet", SAME, rows=10, start=10), record_count=11)
    with pytest.raises(DataFileReadError, match=r"bad\.parquet holds 10 rows but its manifest entry says 11"):
        _joined([good, bad], TABLE)


def test_a_file_with_nan_takes_the_fast_path_with_pyiceberg_result(tmp_path: Path) -> None:
    """NaN is not equal to itself, so comparing the relabelled batch with PyIceberg's by value refused
    the fast path for every file with a NaN; the arrays themselves are compared instead."""
    table = Schema(
        NestedField(1, "id", LongType(), required=True), NestedField(2, "price", DoubleType(), required=False)
    )
    schema = pa.schema([_field("id", pa.int64(), 1, False), _field("price", pa.float64(), 2)])
    path = tmp_path / "nan.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "price": [1.5, float("nan"), None]}, schema=schema), path)
    data_file = _data_file(str(path), 3, path.stat().st_size)
    cache = ProjectionCache()
    for _ in range(2):  # the second read goes through the learnt fast path
        (got,) = iter_data_file_batches(
            PyArrowFileIO(),
            data_file,
            table_schema=table,
            spec=UNPARTITIONED_PARTITION_SPEC,
            name_mapping=None,
            format_version=2,
            batch_size=10,
            cache=cache,
        )
        file_schema = pyarrow_to_schema(schema, None, downcast_ns_timestamp_to_us=True, format_version=2)
        expected = batch_projection(table, file_schema, format_version=2, missing_values={})(
            pq.read_table(path).to_batches()[0]
        )
        assert got.schema.equals(expected.schema, check_metadata=True)
        assert got.to_pylist()[0] == expected.to_pylist()[0]
        assert got.column(1).is_nan().to_pylist() == [False, True, None]
    (projection,) = cache._projections.values()
    assert projection._target is not None


def test_batches_are_the_same_arrays_only_by_their_own_buffers() -> None:
    """The fast path's check: the same arrays, relabelled; never a copy, however equal; empty arrays
    (whose buffers may be empty or absent) compared without error."""
    from airflow_provider_iceberg_exec.engine.io.read import _same_buffers

    batch = pa.record_batch([pa.array([1.0, float("nan")]), pa.array(["a", None])], names=["x", "y"])
    relabelled = pa.RecordBatch.from_arrays(batch.columns, names=["p", "q"])
    copied = pa.record_batch([pa.array([1.0, float("nan")]), pa.array(["a", None])], names=["x", "y"])
    empty = pa.record_batch([pa.array([], pa.string())], names=["y"])
    absent = pa.record_batch([pa.array([None], pa.string()).slice(1)], names=["y"])

    assert _same_buffers(batch, relabelled)
    assert not _same_buffers(batch, copied)
    assert _same_buffers(empty, empty)
    assert not _same_buffers(empty, absent)
    assert not _same_buffers(batch, batch.slice(1))


@pytest.mark.parametrize("dropped", [False, True], ids=["every-column", "map-dropped"])
def test_tiny_files_with_nested_columns_read_joined_give_the_rows_read_alone(
    tmp_path: Path, dropped: bool
) -> None:
    """A nested field's leaf columns are not its field's index: a struct (holding a list), a map and a list
    of structs own the leaves they are made of, and the flat column after them is found after those
    (only the table's columns read: a dropped map's leaves are skipped)."""
    from pyiceberg.types import ListType, MapType, StringType, StructType

    point_type = StructType(
        NestedField(3, "x", LongType()),
        NestedField(4, "y", LongType()),
        NestedField(5, "tags", ListType(6, StringType())),
    )
    history_type = ListType(9, StructType(NestedField(10, "a", LongType()), NestedField(11, "b", LongType())))
    columns = [
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "point", point_type),
        NestedField(12, "attrs", MapType(13, StringType(), 14, LongType())),
        NestedField(7, "history", history_type),
        NestedField(8, "qty", LongType()),
    ]
    table = Schema(*[c for c in columns if not (dropped and c.name == "attrs")])
    point = pa.struct(
        [
            _field("x", pa.int64(), 3),
            _field("y", pa.int64(), 4),
            _field("tags", pa.list_(_field("element", pa.string(), 6)), 5),
        ]
    )
    attrs = pa.map_(_field("key", pa.string(), 13, False), _field("value", pa.int64(), 14))
    history = pa.list_(
        _field("element", pa.struct([_field("a", pa.int64(), 10), _field("b", pa.int64(), 11)]), 9)
    )
    schema = pa.schema(
        [
            _field("id", pa.int64(), 1, False),
            _field("point", point, 2),
            _field("attrs", attrs, 12),
            _field("history", history, 7),
            _field("qty", pa.int64(), 8),
        ]
    )
    files = []
    for number in range(3):
        span = range(number * 10, number * 10 + 10)
        rows = pa.Table.from_pydict(
            {
                "id": list(span),
                "point": [{"x": i, "y": -i, "tags": [f"t{i}"] * (i % 3)} for i in span],
                "attrs": [[(f"k{i}", i)] if i % 2 else None for i in span],
                "history": [[{"a": i, "b": i + 1}] * (i % 2 + 1) for i in span],
                "qty": [i * 2 for i in span],
            },
            schema=schema,
        )
        path = tmp_path / f"n{number}.parquet"
        pq.write_table(rows, path)
        files.append(_claiming(_data_file(str(path), 10, path.stat().st_size)))
    joined = _joined(files, table)
    alone = [batch for data_file in files for batch in _read(data_file, batch_size=64, table=table)]
    assert pa.Table.from_batches(joined).equals(pa.Table.from_batches(alone))
    got = pa.Table.from_batches(joined)
    assert got.column("qty").to_pylist() == [i * 2 for i in range(30)]
    assert got.column("history").to_pylist() == [[{"a": i, "b": i + 1}] * (i % 2 + 1) for i in range(30)]
    assert ("attrs" in got.column_names) is not dropped
    # Read by leaf index, not by ParquetFile's names: id, point's three, attrs' two, history's two, qty.
    with PyArrowFileIO().new_input(files[0].file_path).open() as stream:
        cache = ProjectionCache()
        _, projection = _decode_tiny(stream, files[0], cache, table, UNPARTITIONED_PARTITION_SPEC, None, 2)
    assert projection.file_leaves == 9
    assert projection.leaf_indices == ([0, 1, 2, 3, 6, 7, 8] if dropped else list(range(9)))


def test_tiny_files_with_a_uuid_column_read_joined_give_the_rows_read_alone(tmp_path: Path) -> None:
    """A UUID column is read as ``ParquetFile`` reads it (an Arrow extension type), tiny or not."""
    import uuid

    from pyiceberg.types import UUIDType

    table = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "key", UUIDType()))
    schema = pa.schema([_field("id", pa.int64(), 1, False), _field("key", pa.uuid(), 2)])
    files = []
    for number in range(3):
        keys = [uuid.UUID(int=number * 10 + i).bytes for i in range(10)]
        rows = pa.table(
            {"id": range(number * 10, number * 10 + 10), "key": pa.array(keys, pa.uuid())}, schema=schema
        )
        path = tmp_path / f"u{number}.parquet"
        pq.write_table(rows, path, store_schema=False)  # as Java writes it: the UUID type from Parquet's
        files.append(_claiming(_data_file(str(path), 10, path.stat().st_size)))
    joined = _joined(files, table)
    alone = [batch for data_file in files for batch in _read(data_file, batch_size=64, table=table)]
    assert pa.Table.from_batches(joined).equals(pa.Table.from_batches(alone))
    assert joined[0].schema.equals(alone[0].schema, check_metadata=True)
    # Before the projection: the file's own columns, typed as ParquetFile types them (pa.uuid()).
    with PyArrowFileIO().new_input(files[0].file_path).open() as stream:
        decoded, _ = _decode_tiny(
            stream, files[0], ProjectionCache(), table, UNPARTITIONED_PARTITION_SPEC, None, 2
        )
    assert decoded.schema.equals(pq.ParquetFile(files[0].file_path).read().schema, check_metadata=True)


def _local_opener_forms(tmp_path: Path) -> list[tuple[str, bool]]:
    """Locations of files under ``tmp_path``, each with whether the opener takes it."""
    d = tmp_path / "data"
    return [
        (f"file://{d}/a.parquet", True),
        (f"{d}/a.parquet", True),
        (f"file:{d}/b-1_x.parquet", True),
        (f"{d}/../data/a.parquet", True),  # normalised by PyIceberg as a directory
        (f"file://{d}//b-1_x.parquet", True),
        (f"file://{d}/c%20d.parquet", False),  # not a plain name: left to the FileIO
        (f"file://{d}/e#f.parquet", False),
        (f"{d}/.hidden", False),
        ("s3://bucket/key/a.parquet", False),
    ]


def test_the_local_opener_opens_what_the_file_io_opens_or_leaves_it(tmp_path: Path) -> None:
    """Every location the opener takes opens the file PyArrow's FileIO opens for it (same bytes); the
    others (names that are not plain, remote schemes) are left to the FileIO."""
    from airflow_provider_iceberg_exec.engine.io.read import _LocalOpener

    data = tmp_path / "data"
    data.mkdir()
    for name in ("a.parquet", "b-1_x.parquet", "c%20d.parquet", "c d.parquet", "e#f.parquet", ".hidden"):
        (data / name).write_bytes(name.encode() * 3)
    io = PyArrowFileIO()
    opener = _LocalOpener(io)
    for location, taken in _local_opener_forms(tmp_path):
        stream = opener.open(location)
        assert (stream is not None) == taken, location
        if stream is not None:
            with stream, io.new_input(location).open() as expected:
                assert stream.read() == expected.read(), location


def test_the_local_opener_leaves_other_file_ios_and_schemes_to_them(tmp_path: Path) -> None:
    from airflow_provider_iceberg_exec.engine.io.read import _LocalOpener

    (tmp_path / "a.parquet").write_bytes(b"x")
    location = f"file://{tmp_path}/a.parquet"
    assert _LocalOpener(_PythonStreamFileIO()).open(location) is None  # a subclass may open otherwise
    assert _LocalOpener(_OtherFileIO()).open(location) is None
    # Scheme-less paths that PyIceberg maps to another file system stay with it.
    elsewhere = PyArrowFileIO(properties={"DEFAULT_SCHEME": "s3", "DEFAULT_NETLOC": "bucket"})
    assert _LocalOpener(elsewhere).open(f"{tmp_path}/a.parquet") is None


def test_the_local_opener_names_a_missing_file(tmp_path: Path) -> None:
    from airflow_provider_iceberg_exec.engine.io.read import _LocalOpener

    with pytest.raises(DataFileReadError, match=r"missing\.parquet cannot be opened"):
        _LocalOpener(PyArrowFileIO()).open(f"file://{tmp_path}/missing.parquet")

"""Deletion vectors against Java Iceberg 1.10: our ``deletion-vector-v1`` bytes equal Java's.

Two sources of Java-written DVs:

- Spark's merge-on-read DELETE/UPDATE on a v3 table (``v3_deletion_vectors``): each DV blob is read at
  its manifest entry's offset and size, decoded, re-encoded by us, and compared byte for byte;
- Java's own ``BaseDVFileWriter`` driven through py4j with chosen position sets (runs, array and bitmap
  containers, the 4096 boundary, positions above 2^32 with empty keys below them), so the comparison
  covers what a small Spark table never produces.

And the other way round: the DVs our writer puts in a Puffin file are loaded by Java's
``PositionDeleteIndex.deserialize`` (what Spark's ``BaseDeleteLoader`` runs: length, magic, CRC and
cardinality checked) and hold exactly the positions written. Finally the merge-on-read writer's DVs
(merged with the data files' old DVs) are committed by Java's ``RowDelta`` with the old DVs removed,
and Spark reads the rows left.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table.deletion_vector import deletion_vectors_from_puffin_file
from pyiceberg.table.puffin import PuffinFile
from pyiceberg.typedef import Record

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.deletes.positions import deleted_positions
from airflow_provider_iceberg_exec.engine.deletes.vectors import is_deletion_vector, read_deletion_vector
from airflow_provider_iceberg_exec.engine.io.deletion_vectors import (
    DataFileDeletes,
    decode_deletion_vector,
    encode_deletion_vector,
    write_deletion_vectors,
)
from airflow_provider_iceberg_exec.engine.meta.manifests import read_manifest_entries, v3_field
from airflow_provider_iceberg_exec.engine.meta.scan import is_file_scoped, scan_data_files
from airflow_provider_iceberg_exec.engine.ops.merge.outputs import Outputs
from tests.interop.fixtures import JavaTables
from tests.interop.tables import V3_DELETION_VECTORS, V3_UPGRADED_MIXED_DELETES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

KEY = 1 << 32


def _java_dvs(catalog: SqlCatalog, metadata_location: str) -> list[Any]:
    table = catalog.register_table("ns.t", metadata_location)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    entries = [
        entry.data_file
        for manifest in snapshot.manifests(table.io)
        for entry in read_manifest_entries(table.io, manifest)
    ]
    return [f for f in entries if is_deletion_vector(f)]


def _blob(path: str, offset: int, size: int) -> bytes:
    with PyArrowFileIO().new_input(path).open() as stream:
        stream.seek(offset)
        return stream.read(size)


def test_spark_dvs_re_encode_to_the_same_bytes(java_table: JavaTables, catalog: SqlCatalog) -> None:
    dvs = _java_dvs(catalog, java_table(V3_DELETION_VECTORS))
    assert dvs, "Spark wrote no deletion vector"

    for dv in dvs:
        offset, size = v3_field(dv, "content_offset"), v3_field(dv, "content_size_in_bytes")
        java_bytes = _blob(dv.file_path, offset, size)
        positions = decode_deletion_vector(java_bytes, record_count=dv.record_count)

        assert encode_deletion_vector(positions) == java_bytes
        assert read_deletion_vector(PyArrowFileIO(), dv).tolist() == positions.tolist()


def test_our_dv_footer_matches_spark_s_for_the_same_positions(
    java_table: JavaTables, catalog: SqlCatalog, tmp_path: Path
) -> None:
    dv = _java_dvs(catalog, java_table(V3_DELETION_VECTORS))[0]
    with PyArrowFileIO().new_input(dv.file_path).open() as stream:
        java_puffin = PuffinFile(stream.read())
    (java_blob,) = [b for b in java_puffin.footer.blobs if b.offset == v3_field(dv, "content_offset")]
    referenced = v3_field(dv, "referenced_data_file")
    positions = read_deletion_vector(PyArrowFileIO(), dv)

    (ours,) = write_deletion_vectors(
        PyArrowFileIO(),
        f"file://{tmp_path}/ours.puffin",
        [DataFileDeletes(referenced, dv.spec_id, dv.partition, positions)],
    )
    our_puffin = PuffinFile((tmp_path / "ours.puffin").read_bytes())
    (our_blob,) = our_puffin.footer.blobs

    def comparable(blob: Any) -> dict[str, Any]:
        return blob.model_dump(exclude={"offset"})

    assert comparable(our_blob) == comparable(java_blob)
    assert ours.record_count == dv.record_count
    assert v3_field(ours, "content_size_in_bytes") == v3_field(dv, "content_size_in_bytes")
    assert (ours.content, ours.file_format, ours.spec_id) == (dv.content, dv.file_format, dv.spec_id)
    # and PyIceberg reads ours as it reads Java's
    (java_vector,) = [
        v for v in deletion_vectors_from_puffin_file(java_puffin) if v.referenced_data_file == referenced
    ]
    (our_vector,) = deletion_vectors_from_puffin_file(our_puffin)
    assert our_vector.to_vector().to_pylist() == java_vector.to_vector().to_pylist()


# -- Java's DV writer on chosen positions ------------------------------------------------------------

POSITION_SETS = {
    "one": [0],
    "array": [3, 5, 7, 1000, 65_535, 65_536, 70_000],
    "run": list(range(100, 10_100)),
    "short-runs": [p for start in range(0, 60_000, 100) for p in range(start, start + 3)],
    "bitmap-container": list(range(0, 30_000, 3)),
    "array-at-4096": list(range(0, 2 * 4096, 2)),
    "bitmap-at-4097": list(range(0, 2 * 4097, 2)),
    "mixed-containers": [*range(5000), *range(70_000, 90_000, 5), 200_000, 300_000],
    "keys-with-gaps": [1, KEY + 7, 3 * KEY + 100, 3 * KEY + 101],
    "only-high-key": [2 * KEY + 1, 2 * KEY + 2],
    "run-across-keys": list(range(KEY - 50, KEY + 50)),
}


class _NoPreviousDeletes:
    """A ``java.util.function.Function`` (through py4j's callback server): no data file has earlier
    deletes to merge."""

    def apply(self, _path: str) -> None:
        return None

    class Java:
        implements = ["java.util.function.Function"]  # py4j reads this list


def _java_write(spark: SparkSession, identifier: str, sets: dict[str, list[int]]) -> dict[str, bytes]:
    """Write each position set as the DV of a made-up data file with Java's BaseDVFileWriter; return
    each data file's blob bytes as Java wrote them."""
    jvm = spark._jvm
    assert jvm is not None
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, identifier)
    factory = (
        jvm.org.apache.iceberg.io.OutputFileFactory.builderFor(table, 1, 1)
        .format(jvm.org.apache.iceberg.FileFormat.PUFFIN)
        .build()
    )
    from pyspark.java_gateway import ensure_callback_server_started

    ensure_callback_server_started(spark.sparkContext._gateway)
    writer = jvm.org.apache.iceberg.deletes.BaseDVFileWriter(factory, _NoPreviousDeletes())
    spec = table.spec()
    for name, positions in sets.items():
        path = f"file:/made-up/{name}.parquet"
        for pos in positions:
            writer.delete(path, pos, spec, None)
    writer.close()
    blobs = {}
    for dv in writer.result().deleteFiles():
        blobs[str(dv.referencedDataFile())] = _blob(
            str(dv.location()), int(dv.contentOffset()), int(dv.contentSizeInBytes())
        )
    return blobs


def test_our_bytes_equal_java_s_dv_writer_for_every_container_kind(
    spark: SparkSession, java_table: JavaTables
) -> None:
    identifier = java_table.info(V3_DELETION_VECTORS).spark_identifier

    java = _java_write(spark, identifier, POSITION_SETS)

    assert len(java) == len(POSITION_SETS)
    for name, positions in POSITION_SETS.items():
        java_bytes = java[f"file:/made-up/{name}.parquet"]
        assert encode_deletion_vector(np.array(positions)) == java_bytes, name
        assert decode_deletion_vector(java_bytes, record_count=len(set(positions))).tolist() == sorted(
            set(positions)
        ), name


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_our_bytes_equal_java_s_for_random_positions(
    spark: SparkSession, java_table: JavaTables, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    sets = {
        f"random-{seed}-{i}": sorted(
            {
                *rng.integers(0, 200_000, size=int(rng.integers(1, 3000))).tolist(),
                *range(int(start := rng.integers(0, 100_000)), int(start) + int(rng.integers(0, 5000))),
                *(int(rng.integers(0, 3)) * KEY + int(p) for p in rng.integers(0, 1000, size=5)),
            }
        )
        for i in range(3)
    }

    java = _java_write(spark, java_table.info(V3_DELETION_VECTORS).spark_identifier, sets)

    for name, positions in sets.items():
        assert encode_deletion_vector(np.array(positions)) == java[f"file:/made-up/{name}.parquet"], name


def _java_dv(spark: SparkSession, table: Any, dv: Any, partition_path: str | None = None) -> Any:
    """Java's DeleteFile for one of our delete entries: a DV, or a Parquet position delete file."""
    jvm = spark._jvm
    assert jvm is not None
    builder = (
        jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(table.specs().get(dv.spec_id or 0))
        .ofPositionDeletes()
        .withFormat(jvm.org.apache.iceberg.FileFormat.valueOf(dv.file_format.name))
        .withPath(dv.file_path)
        .withFileSizeInBytes(dv.file_size_in_bytes)
        .withRecordCount(dv.record_count)
    )
    if partition_path:
        builder = builder.withPartitionPath(partition_path)
    if (referenced := v3_field(dv, "referenced_data_file")) is not None:
        builder = builder.withReferencedDataFile(referenced)
    if is_deletion_vector(dv):
        builder = builder.withContentOffset(v3_field(dv, "content_offset")).withContentSizeInBytes(
            v3_field(dv, "content_size_in_bytes")
        )
    return builder.build()


def test_java_loads_our_dvs_with_its_checks(
    spark: SparkSession, java_table: JavaTables, tmp_path: Path
) -> None:
    jvm = spark._jvm
    assert jvm is not None
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, java_table.info(V3_DELETION_VECTORS).spark_identifier
    )
    path = f"file://{tmp_path}/ours.puffin"
    ours = write_deletion_vectors(
        PyArrowFileIO(),
        path,
        [
            DataFileDeletes(f"file:/made-up/{name}.parquet", 0, Record(), np.array(positions))
            for name, positions in POSITION_SETS.items()
        ],
    )
    for dv, (name, positions) in zip(ours, POSITION_SETS.items(), strict=True):
        # what Java's BaseDeleteLoader does with a DV's bytes: length, magic, CRC and cardinality checks
        blob = _blob(dv.file_path, v3_field(dv, "content_offset"), v3_field(dv, "content_size_in_bytes"))
        index = jvm.org.apache.iceberg.deletes.PositionDeleteIndex.deserialize(
            bytearray(blob), _java_dv(spark, table, dv)
        )
        assert index.cardinality() == len(set(positions)), name
        assert all(index.isDeleted(p) for p in positions[:2000]), name
        assert not index.isDeleted(max(positions) + 1), name


def _delete_some_rows(outputs: Outputs, table: Any, changed: list[Any]) -> set[int]:
    """Delete a few live rows of each changed file through the merge writer; their ids."""
    import pyarrow.parquet as pq

    removed_ids: set[int] = set()
    for number, target in enumerate(changed):
        deleted = set(deleted_positions(table.io, target).tolist())
        live = [p for p in range(target.data_file.record_count) if p not in deleted][: 2 + number]
        with table.io.new_input(target.data_file.file_path).open() as stream:
            ids = pq.read_table(stream, columns=["id"]).column("id").to_pylist()
        removed_ids.update(ids[p] for p in live)
        output = outputs.for_file(target, in_place=True, copy_on_write=False)
        output.write_deletes(np.array(live, dtype=np.int64))
        output.close()
    outputs.finish()
    return removed_ids


@pytest.mark.parametrize("kind", [V3_DELETION_VECTORS, V3_UPGRADED_MIXED_DELETES])
def test_merge_on_read_dvs_commit_through_java_and_spark_reads_the_rows_left(
    spark: SparkSession, java_table: JavaTables, catalog: SqlCatalog, tmp_path: Path, kind: str
) -> None:
    """Our merge writer on a v3 table: one DV per changed data file, merged with its old DV and its
    position delete files (partition-scoped ones of the upgraded table too); Java's RowDelta adds ours
    and removes what they replace (reported as rewritten), and Spark, which fails on two DVs for one
    data file, reads exactly the rows that should be left."""
    from pyiceberg.expressions import AlwaysTrue

    built = java_table.fresh(kind)
    table = catalog.register_table("ns.t", built.metadata_location)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    scanned = scan_data_files(table, snapshot, AlwaysTrue())
    with_dv = [f for f in scanned if any(is_deletion_vector(d.data_file) for d in f.delete_files)]
    others = [f for f in scanned if not any(is_deletion_vector(d.data_file) for d in f.delete_files)]
    assert with_dv, "the Java table has no data file with a DV"
    changed = [*with_dv, *others[:2]]
    limits = ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path / "spill"))
    outputs = Outputs(table, table.spec(), "t1", limits)
    outputs.start(str(tmp_path))

    removed_ids = _delete_some_rows(outputs, table, changed)

    assert len(outputs.delete_files) == len(changed)
    assert len({d.file_path for d in outputs.delete_files}) == 1  # one Puffin file for the task
    old_dvs = sorted(
        (d.data_file.file_path, v3_field(d.data_file, "content_offset"))
        for f in with_dv
        for d in f.delete_files
        if is_deletion_vector(d.data_file)
    )
    rewritten = outputs.rewritten_delete_files
    assert sorted(
        (d.file_path, v3_field(d, "content_offset")) for d in rewritten if is_deletion_vector(d)
    ) == (old_dvs)
    assert all(is_file_scoped(d) for d in rewritten)
    jvm = spark._jvm
    assert jvm is not None
    java_table_ = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, built.spark_identifier
    )
    specs, schema = table.metadata.specs(), table.metadata.schema()

    def partition_path(f: Any) -> str | None:
        spec = specs[f.spec_id]
        return spec.partition_to_path(f.partition, schema) if spec.fields else None

    delta = java_table_.newRowDelta().validateFromSnapshot(snapshot.snapshot_id)
    for dv in outputs.delete_files:
        delta.addDeletes(_java_dv(spark, java_table_, dv, partition_path(dv)))
    for old in rewritten:
        delta.removeDeletes(_java_dv(spark, java_table_, old, partition_path(old)))
    delta.commit()
    spark.sql(f"REFRESH TABLE {built.spark_identifier}")

    rows = spark.sql(f"SELECT id FROM {built.spark_identifier}").collect()
    assert tuple(sorted(r.id for r in rows)) == tuple(sorted(set(built.expected_ids) - removed_ids))
    dv_rows = spark.sql(
        f"SELECT referenced_data_file FROM {built.spark_identifier}.delete_files WHERE file_format = 'PUFFIN'"
    ).collect()
    referenced = [r.referenced_data_file for r in dv_rows]
    assert len(referenced) == len(set(referenced))  # one DV per data file

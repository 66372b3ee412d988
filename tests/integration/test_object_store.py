"""Every operation end to end on s3:// tables in a real S3 server (SeaweedFS on loopback).

The catalog is PyIceberg's SQL catalog, on SQLite and on PostgreSQL, with its warehouse in the bucket and
the ``s3.*`` properties the engine's allowlist accepts; the table's FileIO does all object I/O.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import logging
import os
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyarrow.fs import FileSelector
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.types import BinaryType, LongType, NestedField

from airflow_provider_iceberg_exec.cli import main as cli_main
from airflow_provider_iceberg_exec.demo import make_fragmented_table
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig, load_catalog, load_table
from airflow_provider_iceberg_exec.engine.io.session import build_session
from airflow_provider_iceberg_exec.engine.io.storage import register_object_store
from airflow_provider_iceberg_exec.engine.io.write import RollingDataFileWriter
from airflow_provider_iceberg_exec.engine.ops.compaction import (
    commit_compaction,
    compact,
    execute_rewrite_task,
    plan_compaction,
)
from airflow_provider_iceberg_exec.engine.ops.cow import cow_rewrite
from airflow_provider_iceberg_exec.engine.ops.expire import expire_snapshots
from airflow_provider_iceberg_exec.engine.ops.orphans import (
    delete_orphan_files,
    read_orphan_scan_result,
    scan_orphan_files,
)
from tests.helpers import data_files, live_checksum
from tests.integration.services import PostgresServer, SeaweedFS

pytestmark = pytest.mark.integration

MiB = 1024 * 1024


@contextlib.contextmanager
def _sql_uri(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, password: str | None = None
) -> Iterator[str]:
    """A fresh SQL catalog database: a SQLite file, or a new database in the session's PostgreSQL."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path}/catalog.db"
        return
    postgres: PostgresServer = request.getfixturevalue("postgres_server")
    database = postgres.create_database()
    try:
        yield postgres.url(database, password=password)
    finally:
        postgres.drop_database(database)


@pytest.fixture(params=["sqlite", "postgres"])
def s3_config(
    request: pytest.FixtureRequest, tmp_path: Path, seaweedfs_server: SeaweedFS
) -> Iterator[CatalogConfig]:
    """The engine's config of a SQL catalog (SQLite or PostgreSQL) whose warehouse is in the S3 bucket."""
    with _sql_uri(request.param, tmp_path, request) as uri:
        yield CatalogConfig(
            "s3test",
            {
                "type": "sql",
                "uri": uri,
                "warehouse": seaweedfs_server.warehouse(),
                **seaweedfs_server.properties(),
            },
        )


@pytest.fixture
def s3_catalog(s3_config: CatalogConfig) -> Iterator[Catalog]:
    catalog = load_catalog(s3_config)
    yield catalog
    catalog.engine.dispose()  # type: ignore[attr-defined]


def _sqlite_config(name: str, tmp_path: Path, seaweedfs_server: SeaweedFS) -> CatalogConfig:
    """A SQLite SQL catalog with a fresh warehouse prefix in the bucket."""
    return CatalogConfig(
        name,
        {
            "type": "sql",
            "uri": f"sqlite:///{tmp_path}/c.db",
            "warehouse": seaweedfs_server.warehouse(),
            **seaweedfs_server.properties(),
        },
    )


def _limits(tmp_path: Path, memory_limit_bytes: int = 64 * MiB, **kwargs: Any) -> ResourceLimits:
    return ResourceLimits(memory_limit_bytes=memory_limit_bytes, spill_dir=str(tmp_path / "spill"), **kwargs)


def _s3_key(location: str) -> tuple[str, str]:
    bucket, _, key = location.removeprefix("s3://").partition("/")
    return bucket, key


def test_compaction_on_s3_keeps_every_row(
    s3_catalog: Catalog, seaweedfs_server: SeaweedFS, tmp_path: Path
) -> None:
    """Smoke test on both catalog databases: plan, rewrite and commit with every file in the bucket."""
    table = make_fragmented_table(s3_catalog, "ns.events", num_files=5, rows_per_file=400)
    before = live_checksum(table)
    files_before = data_files(table)
    assert all(f.file_path.startswith(f"s3://{seaweedfs_server.bucket}/") for f in files_before)

    result = compact(table, options={"min-input-files": "2"}, limits=_limits(tmp_path))

    assert result["rewritten_data_files_count"] == len(files_before)
    files_after = data_files(table)
    assert result["added_data_files_count"] == len(files_after) == 3  # one per region partition
    assert live_checksum(table) == before
    assert table.current_snapshot().summary.operation.value == "replace"  # type: ignore[union-attr]
    assert table.metadata_location.startswith(f"s3://{seaweedfs_server.bucket}/")
    fs = seaweedfs_server.filesystem()
    for data_file in files_after:
        assert data_file.file_path.startswith(f"s3://{seaweedfs_server.bucket}/")
        info = fs.get_file_info("/".join(_s3_key(data_file.file_path)))
        assert info.size == data_file.file_size_in_bytes


def test_sort_compaction_on_s3_stages_locally_and_writes_to_the_bucket(
    seaweedfs_server: SeaweedFS, tmp_path: Path
) -> None:
    """The sort strategy reads from S3, sorts locally (sorted runs in the spill directory, merged by
    DataFusion), writes to S3."""
    config = _sqlite_config("s3sort", tmp_path, seaweedfs_server)
    table = make_fragmented_table(load_catalog(config), "ns.sorted", num_files=4, rows_per_file=500)
    before = live_checksum(table)
    compact(
        table,
        strategy="sort",
        sort_order="user_id ASC NULLS LAST",
        options={"min-input-files": "2"},
        limits=_limits(tmp_path),
    )
    assert live_checksum(table) == before
    for data_file in data_files(table):
        assert data_file.file_path.startswith(f"s3://{seaweedfs_server.bucket}/")
        with table.io.new_input(data_file.file_path).open() as stream:
            user_ids = pq.read_table(stream, columns=["user_id"]).column("user_id").to_pylist()
        assert user_ids == sorted(user_ids)


def test_cli_compacts_an_s3_table_configured_by_environment(
    seaweedfs_server: SeaweedFS,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``iceberg-exec`` with the catalog in PYICEBERG_CATALOG__* variables, credentials included."""
    properties = {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/cli.db",
        "warehouse": seaweedfs_server.warehouse(),
        **seaweedfs_server.properties(),
    }
    for key, value in properties.items():
        monkeypatch.setenv(
            "PYICEBERG_CATALOG__S3CLI__" + key.replace(".", "__").replace("-", "_").upper(), value
        )
    table = make_fragmented_table(
        load_catalog(CatalogConfig("s3cli", properties)), "ns.events", num_files=4, rows_per_file=300
    )
    before = live_checksum(table)
    out = io.StringIO()
    argv = ["--catalog", "s3cli", "compact", "ns.events", "--option", "min-input-files=2", "--json"]
    code = cli_main([*argv, "--spill-dir", str(tmp_path / "spill")], out=out)
    assert code == 0, capsys.readouterr().err
    result = json.loads(out.getvalue())
    assert result["added_data_files_count"] == 3
    assert live_checksum(table) == before
    text = out.getvalue() + "".join(capsys.readouterr())
    assert seaweedfs_server.secret_key not in text
    assert seaweedfs_server.access_key not in text


# ------------------------------------------------------------------------------------- streaming writes


def _blob_table(catalog: Catalog, name: str, *, files: int, rows_per_file: int, blob_bytes: int) -> Any:
    """A table of incompressible rows (random bytes), so the output file is as large as the input."""
    schema = Schema(
        NestedField(1, "id", LongType(), required=True), NestedField(2, "blob", BinaryType(), required=True)
    )
    catalog.create_namespace_if_not_exists("ns")
    table = catalog.create_table(
        name, schema=schema, properties={"write.parquet.compression-codec": "uncompressed"}
    )
    arrow_schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), pa.field("blob", pa.binary(), nullable=False)]
    )
    for number in range(files):
        start = number * rows_per_file
        table.append(
            pa.table(
                {
                    "id": pa.array(range(start, start + rows_per_file), pa.int64()),
                    "blob": pa.array([os.urandom(blob_bytes) for _ in range(rows_per_file)], pa.binary()),
                },
                schema=arrow_schema,
            )
        )
    return table


def _blob_fingerprint(table: Any) -> tuple[int, int]:
    """``(rows, order-independent sum of ids and of each blob's first 8 bytes)``, read by PyIceberg's scan.

    The blobs are random, so their first bytes identify them; cheaper than hashing every row in Python.
    """
    import numpy as np
    import pyarrow.compute as pc

    table.refresh()
    rows, total = 0, 0
    for batch in table.scan().to_arrow_batch_reader():
        heads = pc.binary_slice(batch.column("blob"), 0, 8).cast(pa.binary(8))
        words = np.frombuffer(heads.buffers()[1], dtype=np.uint64, count=len(heads), offset=heads.offset * 8)
        total += int(words.sum(dtype=np.uint64)) + int(pc.sum(batch.column("id")).as_py() or 0)
        rows += batch.num_rows
    return rows, total % (1 << 64)


def test_rewrite_output_is_streamed_as_a_multipart_upload(
    seaweedfs_server: SeaweedFS, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An output file several times the writer's buffer goes up in parts while it is still being written.

    The server's view, just before the writer finishes the file: a multipart upload of that key is in
    progress and the server already holds parts of it, more bytes than the writer may buffer. After:
    the object's ETag is ``<md5>-<parts>``, S3's mark of a completed multipart upload.
    """
    config = _sqlite_config("stream", tmp_path, seaweedfs_server)
    table = _blob_table(load_catalog(config), "ns.blobs", files=4, rows_per_file=8_000, blob_bytes=1024)
    before = _blob_fingerprint(table)
    limits = _limits(tmp_path, memory_limit_bytes=32 * MiB)  # the writer buffers at most 4 MiB

    seen_at_close: list[tuple[str, list[int]]] = []
    close = RollingDataFileWriter._close_current

    def observe_then_close(writer: RollingDataFileWriter) -> None:
        current = writer._current
        if current is not None:  # the last row group and the footer are still to be written
            bucket, key = _s3_key(current.path)
            # Parts go up on the stream's background threads: the writer waits here, so a part that
            # lands while it waits was still sent before the file was finished. Under load the last
            # ones can lag: wait for them (a file buffered whole has no upload to wait for).
            deadline = time.monotonic() + 10
            while True:
                upload_id = seaweedfs_server.multipart_uploads(bucket, prefix=key).get(key)
                parts = seaweedfs_server.uploaded_parts(bucket, key, upload_id) if upload_id else []
                if sum(parts) > limits.writer_buffer_bytes or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            seen_at_close.append((key, parts))
        close(writer)

    monkeypatch.setattr(RollingDataFileWriter, "_close_current", observe_then_close)
    compact(table, options={"min-input-files": "2", "target-file-size-bytes": str(512 * MiB)}, limits=limits)

    (output,) = data_files(table)
    ((key, parts_before_close),) = seen_at_close
    assert output.file_path.endswith(key)
    assert output.file_size_in_bytes > 6 * limits.writer_buffer_bytes
    assert parts_before_close, "nothing was uploaded before the writer finished: the file was buffered whole"
    assert sum(parts_before_close) > limits.writer_buffer_bytes
    etag = seaweedfs_server.head_object(*_s3_key(output.file_path))["etag"].strip('"')
    assert "-" in etag, f"ETag {etag} is not a multipart upload's"
    assert int(etag.rsplit("-", 1)[1]) > len(parts_before_close)
    assert _blob_fingerprint(table) == before


# ------------------------------------------------------------------------------------ DataFusion mapping


def test_datafusion_reads_and_writes_where_pyiceberg_does(
    seaweedfs_server: SeaweedFS, tmp_path: Path
) -> None:
    """The one property mapping gives DataFusion the bucket PyIceberg's FileIO writes to."""
    config = _sqlite_config("df", tmp_path, seaweedfs_server)
    table = make_fragmented_table(
        load_catalog(config), "ns.events", num_files=2, rows_per_file=300, partitioned=False
    )
    files = data_files(table)
    ctx = build_session(_limits(tmp_path))
    register_object_store(ctx, table.metadata.location, config.properties)

    ctx.register_parquet("t", files[0].file_path)
    with table.io.new_input(files[0].file_path).open() as stream:
        ids = pq.read_table(stream, columns=["id"]).column("id").to_pylist()
    seen = ctx.sql("select count(*) as n, sum(id) as total from t").to_pydict()
    assert seen == {"n": [len(ids)], "total": [sum(ids)]}

    target = f"{table.metadata.location}/datafusion-out/"
    ctx.sql("select id, user_id from t").write_parquet(target)
    selector = FileSelector("/".join(_s3_key(target)), recursive=True)
    written = [
        i.path for i in seaweedfs_server.filesystem().get_file_info(selector) if i.path.endswith(".parquet")
    ]
    assert written
    rows = 0
    for path in written:
        with table.io.new_input(f"s3://{path}").open() as stream:
            rows += pq.read_metadata(stream).num_rows
    assert rows == files[0].record_count


# ------------------------------------------------------------------------------------------- credentials


def test_credentials_never_appear_in_logs_results_or_errors(
    seaweedfs_server: SeaweedFS,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """DEBUG logs, printed output, result documents (what goes to XCom) and errors never hold a secret.

    The PostgreSQL catalog's URI carries a password too (trust authentication ignores it). ``capfd``
    captures at the file-descriptor level, so output of the native libraries (the AWS SDK in PyArrow,
    DataFusion) is searched as well as Python's.
    """
    db_password = "pg-pw-" + os.urandom(6).hex()
    secrets = {
        "s3 secret key": seaweedfs_server.secret_key,
        "s3 access key": seaweedfs_server.access_key,
        "database password": db_password,
    }
    caplog.set_level(logging.DEBUG)
    with _sql_uri("postgres", tmp_path, request, password=db_password) as uri:
        config = CatalogConfig(
            "secret",
            {
                "type": "sql",
                "uri": uri,
                "warehouse": seaweedfs_server.warehouse(),
                **seaweedfs_server.properties(),
            },
        )
        catalog = load_catalog(config)
        try:
            table = make_fragmented_table(catalog, "ns.events", num_files=3, rows_per_file=200)
            documents: list[Any] = []
            plan = plan_compaction(table, options={"min-input-files": "2"})
            results = [execute_rewrite_task(table, task, _limits(tmp_path)) for task in plan["tasks"]]
            documents += [
                plan,
                results,
                commit_compaction(table, results, commit_id="secret-1"),
                repr(config),
            ]

            errors: list[BaseException] = []
            # A wrong bucket: the table's data path points at a bucket that does not exist.
            with table.transaction() as transaction:
                transaction.set_properties(
                    {"write.data.path": f"s3://no-such-bucket-{os.urandom(3).hex()}/data"}
                )
            with pytest.raises(Exception) as wrong_bucket:  # noqa: PT011 - whatever it is, it must be clean
                compact(
                    table, options={"min-input-files": "1", "rewrite-all": "true"}, limits=_limits(tmp_path)
                )
            errors.append(wrong_bucket.value)
            # A wrong secret: the server refuses the signature.
            bad = CatalogConfig(
                "secret", {**config.properties, "s3.secret-access-key": "not-" + secrets["s3 secret key"]}
            )
            secrets["wrong secret key"] = "not-" + secrets["s3 secret key"]
            with pytest.raises(Exception) as refused:  # noqa: PT011
                load_table(load_catalog(bad), "ns.events").scan().to_arrow()
            errors.append(refused.value)
        finally:
            catalog.engine.dispose()  # type: ignore[attr-defined]

    assert "no-such-bucket" in str(errors[0]) or "NoSuchBucket" in str(errors[0]).replace("_", "")
    assert "ACCESS_DENIED" in str(errors[1]) or "denied" in str(errors[1]).lower()
    captured = [record.getMessage() for record in caplog.records]
    captured += [str(record.args) for record in caplog.records]
    captured += list(capfd.readouterr())  # fd-level: Python's and native libraries' stdout and stderr
    captured += [json.dumps(documents, default=str)]
    captured += ["".join(traceback.format_exception(error)) for error in errors]
    assert any(r.levelname == "DEBUG" for r in caplog.records)  # DEBUG was really on
    text = "\n".join(captured)
    leaked = [name for name, value in secrets.items() if value in text]
    assert not leaked, f"{leaked} found in logs, output, results or errors"


# ---------------------------------------------------------------------- copy-on-write, orphans, expiry


@pytest.fixture
def s3_table(seaweedfs_server: SeaweedFS, tmp_path: Path) -> Iterator[Any]:
    """A fragmented, region-partitioned demo table in the bucket (SQLite catalog)."""
    config = _sqlite_config("maint", tmp_path, seaweedfs_server)
    catalog = load_catalog(config)
    yield make_fragmented_table(catalog, "ns.events", num_files=3, rows_per_file=300)
    catalog.engine.dispose()  # type: ignore[attr-defined]


def _exists(seaweedfs_server: SeaweedFS, location: str) -> bool:
    from pyarrow.fs import FileType

    return bool(
        seaweedfs_server.filesystem().get_file_info("/".join(_s3_key(location))).type == FileType.File
    )


def test_copy_on_write_delete_and_update_on_s3(
    s3_table: Any, seaweedfs_server: SeaweedFS, tmp_path: Path
) -> None:
    """A delete keeps exactly the rows that do not match; an update changes only the matching rows."""
    kept = live_checksum(s3_table, row_filter="user_id >= 20000")
    deleted = cow_rewrite(s3_table, operation="delete", where="user_id < 20000", limits=_limits(tmp_path))
    assert s3_table.current_snapshot().summary.operation.value in ("overwrite", "delete")
    assert deleted["deleted_data_files_count"] > 0
    assert live_checksum(s3_table) == kept

    eu_rows, _ = live_checksum(s3_table, row_filter="region = 'eu'")
    cow_rewrite(
        s3_table,
        operation="update",
        where="region = 'eu'",
        set_columns={"payload": "'changed'"},
        limits=_limits(tmp_path),
    )
    assert live_checksum(s3_table, row_filter="payload = 'changed'")[0] == eu_rows
    assert live_checksum(s3_table, row_filter="region != 'eu'") == live_checksum(
        s3_table, row_filter="payload != 'changed'"
    )
    for data_file in data_files(s3_table):
        assert data_file.file_path.startswith(f"s3://{seaweedfs_server.bucket}/")
        assert _exists(seaweedfs_server, data_file.file_path)


def test_orphan_files_are_found_and_removed_on_s3(
    s3_table: Any, seaweedfs_server: SeaweedFS, tmp_path: Path
) -> None:
    """The bucket is listed through the table's FileIO; only the unreferenced object goes."""
    compact(s3_table, options={"min-input-files": "2"}, limits=_limits(tmp_path))  # old files stay referenced
    before = live_checksum(s3_table)
    orphan = f"{s3_table.metadata.location}/data/region=eu/orphan-{os.urandom(4).hex()}.parquet"
    with seaweedfs_server.filesystem().open_output_stream("/".join(_s3_key(orphan))) as out:
        out.write(b"not referenced by any metadata")
    # S3 objects cannot be back-dated: look from three days ahead, where everything is old enough.
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=3)

    scan = scan_orphan_files(s3_table, older_than="1d", now=later, limits=_limits(tmp_path))
    assert scan["orphan_file_count"] == 1, scan
    assert scan["orphan_list_uri"].startswith(f"{s3_table.metadata.location}/")  # staged in the bucket
    assert read_orphan_scan_result(s3_table.io, scan["orphan_list_uri"])["orphan_sample"] == [orphan]
    # The delete re-applies the 24-hour fence itself unless forced: the scan looked from the future.
    deleted = delete_orphan_files(s3_table, scan, force=True)
    assert deleted["deleted_file_count"] == 1, deleted

    assert not _exists(seaweedfs_server, orphan)
    assert live_checksum(s3_table) == before
    for snapshot in s3_table.snapshots():  # every snapshot is still readable
        assert s3_table.scan(snapshot_id=snapshot.snapshot_id).to_arrow().num_rows > 0


def test_expiry_deletes_the_files_only_expired_snapshots_reached_on_s3(
    s3_table: Any, seaweedfs_server: SeaweedFS, tmp_path: Path
) -> None:
    replaced = [f.file_path for f in data_files(s3_table)]
    compact(s3_table, options={"min-input-files": "2"}, limits=_limits(tmp_path))
    before = live_checksum(s3_table)
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)

    result = expire_snapshots(s3_table, older_than=later, retain_last=1, now=later, limits=_limits(tmp_path))

    assert result["deleted_data_files_count"] == len(replaced), result
    assert len(s3_table.snapshots()) == 1
    assert not any(_exists(seaweedfs_server, path) for path in replaced)
    assert all(_exists(seaweedfs_server, f.file_path) for f in data_files(s3_table))
    assert live_checksum(s3_table) == before


def test_equality_delete_resolution_on_s3(seaweedfs_server: SeaweedFS, tmp_path: Path) -> None:
    """Equality deletes on an s3:// table are applied by the rewrite and their file is removed."""
    import pyarrow as pa

    from airflow_provider_iceberg_exec.engine.ops.resolve import resolve_equality_deletes
    from tests.integration.test_deletes import (
        _append,
        _commit_deletes,
        _create,
        _equality_deletes,
        _ids,
        _live_delete_files,
    )

    catalog = load_catalog(_sqlite_config("resolve", tmp_path, seaweedfs_server))
    catalog.create_namespace("ns")
    table = _create(catalog)
    _append(table, range(10))
    _append(table, range(10, 20))
    _commit_deletes(table, [_equality_deletes(table, {"id": (1, pa.int64(), [2, 3, 15])}, spec_id=0)])
    assert table.location().startswith(f"s3://{seaweedfs_server.bucket}/")

    result = resolve_equality_deletes(table, limits=_limits(tmp_path))

    assert result["removed_delete_files_count"] == 1
    assert _live_delete_files(table) == []
    assert _ids(table) == [i for i in range(20) if i not in (2, 3, 15)]
    for data_file in data_files(table):
        assert _exists(seaweedfs_server, data_file.file_path)
    catalog.engine.dispose()  # type: ignore[attr-defined]

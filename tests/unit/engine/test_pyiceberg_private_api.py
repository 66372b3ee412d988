"""Every PyIceberg-private name the engine relies on, checked against the installed PyIceberg.

The engine uses PyIceberg's private API in three modules only (docs/architecture.md): commit/snapshots.py
subclasses ``_SnapshotProducer``, meta/manifests.py subclasses the manifest writers, io/read.py projects
with two private functions. A PyIceberg upgrade that renames or reshapes one of them fails here, by name,
instead of deep inside a commit.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField


@pytest.fixture
def table(tmp_path: Path):
    catalog = SqlCatalog("private", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    yield catalog.create_table("ns.t", Schema(NestedField(1, "id", LongType(), required=False)))
    catalog.engine.dispose()


def test_snapshot_producer_hooks_and_state_used_by_commit_snapshots(table) -> None:
    from pyiceberg.table.update.snapshot import _SnapshotProducer

    hooks = (
        "_commit",
        "_manifests",
        "_deleted_entries",
        "_existing_manifests",
        "_summary",
        "_validate_concurrency",
    )
    for name in (*hooks, "new_manifest_output", "_clean_all_uncommitted", "commit"):
        assert callable(getattr(_SnapshotProducer, name, None)), name
    assert list(inspect.signature(_SnapshotProducer._summary).parameters) == ["self", "snapshot_properties"]
    producer = table.transaction().update_snapshot().fast_append()
    assert isinstance(producer, _SnapshotProducer)
    for attribute in (
        "_transaction",
        "_io",
        "_snapshot_id",
        "_parent_snapshot_id",
        "_target_branch",
        "_compression",
        "_operation",
        "commit_uuid",
        "snapshot_properties",
    ):
        assert hasattr(producer, attribute), attribute
    transaction = producer._transaction
    assert transaction._table is table
    assert transaction.table_metadata.format_version == table.metadata.format_version


def test_manifest_writer_internals_used_by_meta_manifests(tmp_path: Path) -> None:
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import ManifestWriterV1, ManifestWriterV2
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC

    schema = Schema(NestedField(1, "id", LongType(), required=False))
    for writer_class in (ManifestWriterV1, ManifestWriterV2):
        assert isinstance(inspect.getattr_static(writer_class, "_meta"), property), writer_class
        output = PyArrowFileIO().new_output(f"file://{tmp_path}/{writer_class.__name__}.avro")
        writer = writer_class(UNPARTITIONED_PARTITION_SPEC, schema, output, 1, "null")
        for attribute in ("_output_file", "_spec", "_schema"):
            assert hasattr(writer, attribute), (writer_class, attribute)
        assert isinstance(writer._meta, dict)
        assert callable(writer.new_writer)


def test_projection_functions_used_by_io_read() -> None:
    from pyiceberg.io.pyarrow import _get_column_projection_values, _to_requested_schema

    requested = inspect.signature(_to_requested_schema).parameters
    assert list(requested)[:3] == ["requested_schema", "file_schema", "batch"]
    for keyword in (
        "downcast_ns_timestamp_to_us",
        "include_field_ids",
        "format_model",
        "projected_missing_fields",
        "allow_timestamp_tz_mismatch",
    ):
        assert keyword in requested, keyword
    assert list(inspect.signature(_get_column_projection_values).parameters) == [
        "file",
        "projected_schema",
        "table_schema",
        "partition_spec",
        "file_project_field_ids",
    ]

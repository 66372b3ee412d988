"""Every PyIceberg-private name the engine relies on, checked against the installed PyIceberg.

The engine uses PyIceberg's private API in two modules only, its fences: commit/pyiceberg_producer.py
(the snapshot producer of the commits) and io/pyiceberg_internals.py (reading and writing helpers). A
PyIceberg upgrade that renames or reshapes one of those names fails here, by name, instead of deep inside
a commit; and a private name used anywhere else, or used in a fence without a test here, fails too.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pyiceberg
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

import airflow_provider_iceberg_exec.engine as engine_package

ENGINE = Path(engine_package.__file__).parent
COMMIT_FENCE = "commit/pyiceberg_producer.py"
IO_FENCE = "io/pyiceberg_internals.py"

#: every PyIceberg-private name each fence uses; each is checked by a test below
FENCE_NAMES = {
    COMMIT_FENCE: {
        "_SnapshotProducer",
        # hooks it overrides
        "_commit",
        "_deleted_entries",
        "_existing_manifests",
        "_manifests",
        "_summary",
        "_validate_concurrency",
        # state it reads or sets, and what it calls
        "_compression",
        "_io",
        "_operation",
        "_parent_snapshot_id",
        "_snapshot_id",
        "_starting_snapshot_id",
        "_transaction",
        "_clean_all_uncommitted",
        "_apply",
        # ManifestsProducer records its optimized-m-*.avro manifests there for PyIceberg's cleanup
        "_written_manifests",
        # format version 3: _commit_v3 names and records the manifest list as PyIceberg's _commit does
        "_new_manifest_list_file_name",
        "_written_manifest_lists",
        "_target_branch",
        "_table",
    },
    IO_FENCE: {
        "_to_requested_schema",
        "_get_column_projection_values",
        "_get_parquet_writer_kwargs",
        "_StrictMetricsEvaluator",
        "_InclusiveMetricsEvaluator",
        "_inherit_from_manifest",
        "_meta",
        "_output_file",
        # the manifest writer's encoder writes each integer's varint to BinaryEncoder's stream at once
        "_output_stream",
    },
}

#: private uses in modules other engineers are moving behind the fences: io/pyiceberg_internals.py's
#: strict_metrics_evaluator (ops/cow.py) and commit/pyiceberg_producer.py's apply_updates (ops/expire.py).
#: Remove an entry once its module calls the fence; the test fails until then and after.
# -- finding PyIceberg-private names in the engine's source ------------------------------------------


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@cache
def _pyiceberg_private_names() -> frozenset[str]:
    """Every private name PyIceberg's source defines: functions, methods, class and instance attributes."""
    names: set[str] = set()
    for path in Path(pyiceberg.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return frozenset(name for name in names if _is_private(name))


def _pyiceberg_bases(tree: ast.Module) -> dict[str, type]:
    """The module's classes that subclass a PyIceberg class, each with that PyIceberg class."""
    imported: dict[str, type] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pyiceberg":
            module = importlib.import_module(node.module or "")
            for alias in node.names:
                value = getattr(module, alias.name, None)
                if isinstance(value, type):
                    imported[alias.asname or alias.name] = value
    found: dict[str, type] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                name = base.value if isinstance(base, ast.Subscript) else base
                if isinstance(name, ast.Name) and name.id in imported:
                    found[node.name] = imported[name.id]
                elif isinstance(name, ast.Name) and name.id in found:
                    found[node.name] = found[name.id]
    return found


def _names_of(base: type) -> set[str]:
    """The private names a PyIceberg class and its PyIceberg ancestors define (instance attributes too)."""
    names = {name for name in dir(base) if _is_private(name)}
    for cls in base.__mro__:
        if cls.__module__.split(".")[0] != "pyiceberg":
            continue
        names |= set(getattr(cls, "__annotations__", {}))
        tree = ast.parse(inspect.getsource(cls).strip())  # dedent-free: class sources start at column 0
        names |= {
            n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
        }
    return {name for name in names if _is_private(name)}


def _is_self_or_super(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _private_uses(path: Path) -> set[str]:
    """The PyIceberg-private names a module uses.

    - ``from pyiceberg... import _x``;
    - in a subclass of a PyIceberg class: a method ``_x`` it overrides, or ``self._x`` / ``super()._x``,
      where PyIceberg's class defines ``_x``;
    - ``obj._x`` on anything else, where PyIceberg defines ``_x`` and the engine does not.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    uses: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pyiceberg":
            uses |= {alias.name for alias in node.names if _is_private(alias.name)}
    subclasses = _pyiceberg_bases(tree)
    inside: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in subclasses:
            theirs = _names_of(subclasses[node.name])
            for child in ast.walk(node):
                inside.add(id(child))
                if isinstance(child, ast.FunctionDef) and child.name in theirs:
                    uses.add(child.name)
                elif (
                    isinstance(child, ast.Attribute)
                    and _is_self_or_super(child.value)
                    and child.attr in theirs
                ):
                    uses.add(child.attr)
    ours = _engine_private_names()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and id(node) not in inside
            and not _is_self_or_super(node.value)
            and node.attr in _pyiceberg_private_names()
            and node.attr not in ours
        ):
            uses.add(node.attr)
    return uses


@cache
def _engine_private_names() -> frozenset[str]:
    """The private names the engine itself defines (so that ``obj._x`` on our own objects is ours)."""
    names: set[str] = set()
    for path in _engine_modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return frozenset(name for name in names if _is_private(name))


def _engine_modules() -> Iterator[Path]:
    return iter(sorted(ENGINE.rglob("*.py")))


def test_only_the_two_fences_use_pyiceberg_private_names() -> None:
    found = {}
    for path in _engine_modules():
        relative = path.relative_to(ENGINE).as_posix()
        if relative not in FENCE_NAMES and (uses := _private_uses(path)):
            found[relative] = uses
    assert found == {}


@pytest.mark.parametrize("fence", sorted(FENCE_NAMES))
def test_every_private_name_of_a_fence_is_tested_here(fence: str) -> None:
    """A new private use, or a PyIceberg upgrade that defines one of our own names, shows up here."""
    assert _private_uses(ENGINE / fence) == FENCE_NAMES[fence]


def test_the_scan_sees_our_own_private_names_as_ours(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from pyiceberg.manifest import ManifestWriterV2, _inherit_from_manifest\n"
        "class Ours:\n"
        "    def _manifests(self):\n"
        "        return self._meta\n"
        "class Theirs(ManifestWriterV2):\n"
        "    def _helper_of_ours(self):\n"
        "        return self._meta, self._not_theirs\n"
        "def f(other, writer):\n"
        "    return other._written_manifests, writer._io\n"
    )
    assert _private_uses(module) == {"_inherit_from_manifest", "_meta", "_written_manifests"}


# -- commit/pyiceberg_producer.py ------------------------------------------------------------------


@pytest.fixture
def table(tmp_path: Path):
    catalog = SqlCatalog("private", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    yield catalog.create_table("ns.t", Schema(NestedField(1, "id", LongType(), required=False)))
    catalog.engine.dispose()


def _parameters(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)  # type: ignore[arg-type]


def test_snapshot_producer_hooks_keep_their_signatures() -> None:
    from pyiceberg.table.update.snapshot import _SnapshotProducer

    assert _parameters(_SnapshotProducer.__init__) == [
        "self",
        "operation",
        "transaction",
        "io",
        "commit_uuid",
        "snapshot_properties",
        "branch",
    ]
    for hook in ("_commit", "_manifests", "_deleted_entries", "_existing_manifests", "_validate_concurrency"):
        assert _parameters(getattr(_SnapshotProducer, hook)) == ["self"], hook
    assert _parameters(_SnapshotProducer._summary) == ["self", "snapshot_properties"]
    assert _parameters(_SnapshotProducer._clean_all_uncommitted) == ["self"]
    assert _parameters(_SnapshotProducer.new_manifest_output) == ["self"]
    assert isinstance(inspect.getattr_static(_SnapshotProducer, "snapshot_id"), property)


def test_snapshot_producer_state_read_by_the_commit_producer(table) -> None:
    from pyiceberg.table.update.snapshot import _SnapshotProducer

    producer = table.transaction().update_snapshot().fast_append()
    assert isinstance(producer, _SnapshotProducer)
    for attribute in (
        "_transaction",
        "_io",
        "_snapshot_id",
        "_parent_snapshot_id",
        "_starting_snapshot_id",
        "_compression",
        "_operation",
        "snapshot_properties",
    ):
        assert hasattr(producer, attribute), attribute
    assert producer._transaction.table_metadata.format_version == table.metadata.format_version
    assert producer._io is table.io
    assert producer.snapshot_id == producer._snapshot_id


def test_written_manifests_are_what_the_cleanup_deletes(table, tmp_path: Path) -> None:
    """ManifestsProducer names its own manifests and appends them to ``_written_manifests``: PyIceberg's
    cleanup must delete exactly those, also after a retry moved them aside."""
    producer = table.transaction().update_snapshot().fast_append()
    assert producer._written_manifests == []
    paths = []
    for name in ("optimized-m-1.avro", "optimized-m-2.avro"):
        path = tmp_path / name
        path.write_bytes(b"x")
        paths.append(str(path))
    producer._written_manifests.append(paths[0])
    producer._refresh_for_retry()  # a retry: the first attempt's manifests are now uncommitted
    producer._written_manifests.append(paths[1])
    producer._clean_all_uncommitted()
    assert not any(Path(p).exists() for p in paths)


def test_refresh_for_retry_moves_the_parent_to_the_new_head(table) -> None:
    """The producer validates against ``_parent_snapshot_id``: each retry must point it at the head."""
    import pyarrow as pa

    producer = table.transaction().update_snapshot().fast_append()
    assert producer._parent_snapshot_id is None
    table.append(pa.table({"id": pa.array([1], pa.int64())}))
    producer._refresh_for_retry()
    assert producer._parent_snapshot_id == table.metadata.current_snapshot_id


def test_transaction_retry_loop_drives_the_producer_hooks() -> None:
    """``commit_transaction`` must still re-run ``_commit`` per retry and clean up on validation errors."""
    from pyiceberg.table import Transaction

    source = inspect.getsource(Transaction)
    for name in (
        "_refresh_for_retry",
        "_validate_concurrency",
        "_commit()",
        "_clean_all_uncommitted",
        "_starting_snapshot_id",
    ):
        assert name in source, name
    assert _parameters(Transaction._apply) == ["self", "updates", "requirements"]


def test_v3_commit_internals(table) -> None:
    """_commit_v3 repeats PyIceberg's _commit: the list's name, where it is recorded, the branch."""
    import uuid

    from pyiceberg.table.update.snapshot import _new_manifest_list_file_name, _SnapshotProducer

    commit_uuid = uuid.uuid4()
    assert _new_manifest_list_file_name(snapshot_id=7, attempt=0, commit_uuid=commit_uuid) == (
        f"snap-7-0-{commit_uuid}.avro"
    )
    producer = table.transaction().update_snapshot().fast_append()
    assert producer._written_manifest_lists == []
    assert producer._target_branch == "main"
    assert producer._transaction._table is table
    assert isinstance(producer.commit_uuid, uuid.UUID)
    source = inspect.getsource(_SnapshotProducer._commit)
    for name in ("_written_manifest_lists.append", "_new_manifest_list_file_name", "location_provider()"):
        assert name in source, name


def test_catalogs_write_metadata_through_their_write_metadata() -> None:
    """v3_metadata_writer replaces ``_write_metadata`` on one catalog object (an attribute it sets, which
    the scan above does not see as a use): it must stay a static method the SQL catalog calls on self."""
    from pyiceberg.catalog import MetastoreCatalog

    assert isinstance(inspect.getattr_static(MetastoreCatalog, "_write_metadata"), staticmethod)
    assert _parameters(MetastoreCatalog._write_metadata) == ["metadata", "io", "metadata_path"]
    assert issubclass(SqlCatalog, MetastoreCatalog)
    assert "self._write_metadata(" in inspect.getsource(SqlCatalog.commit_table)


# -- io/pyiceberg_internals.py ---------------------------------------------------------------------


def test_manifest_writer_internals(tmp_path: Path) -> None:
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import ManifestWriter, ManifestWriterV1, ManifestWriterV2
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC

    schema = Schema(NestedField(1, "id", LongType(), required=False))
    for writer_class in (ManifestWriterV1, ManifestWriterV2):
        assert isinstance(inspect.getattr_static(writer_class, "_meta"), property), writer_class
        assert _parameters(writer_class.__init__) == [
            "self",
            "spec",
            "schema",
            "output_file",
            "snapshot_id",
            "avro_compression",
        ]
        output = PyArrowFileIO().new_output(f"file://{tmp_path}/{writer_class.__name__}.avro")
        writer = writer_class(UNPARTITIONED_PARTITION_SPEC, schema, output, 1, "null")
        assert writer._output_file is output
        assert isinstance(writer._meta, dict)
        # what our subclasses override, and the one attribute they add
        assert _parameters(writer.new_writer) == []
        assert _parameters(writer.add_entry) == ["entry"]
        assert _parameters(writer.content) == []
        assert not hasattr(writer, "entry_layout")
    assert (
        ManifestWriterV2(UNPARTITIONED_PARTITION_SPEC, schema, output, 1, "null")._meta["content"] == "data"
    )
    assert callable(ManifestWriter.to_manifest_file)


def test_projection_functions() -> None:
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
    assert _parameters(_get_column_projection_values) == [
        "file",
        "projected_schema",
        "table_schema",
        "partition_spec",
        "file_project_field_ids",
    ]


def test_parquet_writer_kwargs() -> None:
    """io/write.py renames ``write_batch_size`` (see RollingDataFileWriter): it must still be there."""
    from pyiceberg.io.pyarrow import _get_parquet_writer_kwargs

    assert _parameters(_get_parquet_writer_kwargs) == ["table_properties"]
    assert "write_batch_size" in _get_parquet_writer_kwargs({})


def test_strict_metrics_evaluator() -> None:
    from pyiceberg.expressions import GreaterThan
    from pyiceberg.expressions.visitors import _StrictMetricsEvaluator

    from airflow_provider_iceberg_exec.engine.io.pyiceberg_internals import strict_metrics_evaluator

    assert _parameters(_StrictMetricsEvaluator.__init__)[:4] == ["self", "schema", "expr", "case_sensitive"]
    assert _parameters(_StrictMetricsEvaluator.eval) == ["self", "file"]
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    assert callable(strict_metrics_evaluator(schema, GreaterThan("id", 1)))


def test_inclusive_metrics_evaluator() -> None:
    from pyiceberg.expressions import GreaterThan
    from pyiceberg.expressions.visitors import _InclusiveMetricsEvaluator

    from airflow_provider_iceberg_exec.engine.io.pyiceberg_internals import inclusive_metrics_evaluator

    assert _parameters(_InclusiveMetricsEvaluator.__init__)[:5] == [
        "self",
        "schema",
        "expr",
        "case_sensitive",
        "include_empty_files",
    ]
    assert _parameters(_InclusiveMetricsEvaluator.eval) == ["self", "file"]
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    assert callable(inclusive_metrics_evaluator(schema, GreaterThan("id", 1)))


def test_inherit_from_manifest() -> None:
    from pyiceberg.manifest import _inherit_from_manifest

    assert _parameters(_inherit_from_manifest) == ["entry", "manifest"]

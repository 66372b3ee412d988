"""Orphan-file removal and snapshot expiry (Spark's ``remove_orphan_files`` and ``expire_snapshots``).

Orphan removal is two tasks, so that a person or a Param can stand between finding and deleting::

    scan = OrphanScanOperator(task_id="orphan_scan", table="db.events", older_than="7d")
    delete = OrphanDeleteOperator(task_id="orphan_delete", scan_result=scan.output, dry_run_only=True)

The scan writes the orphan list as a file under the table's ``metadata/iceberg-exec-staging/`` and returns
a small result (counts, bytes, a sample of at most 20 paths and the list's URI), so that millions of paths
never pass through XCom. The delete step reads that list and re-checks the table before each batch.

:class:`ExpireSnapshotsOperator` expires snapshots with Java's rules and deletes the files only they
reached.

The operators only render templates, build the engine's arguments, call the engine and return its JSON;
the engine (``airflow_provider_iceberg_exec.engine.ops.orphans`` and ``.expire``) is imported inside
``execute()`` so that parsing a DAG file never imports PyArrow, DataFusion or PyIceberg.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_iceberg_exec import settings
from airflow_provider_iceberg_exec.hooks.iceberg_exec import IcebergExecHook
from airflow_provider_iceberg_exec.operators._common import (
    CatalogHookMixin,
    PoolDefaultsPartial,
    engine_errors,
    normalize_options,
    optional_text,
    payload_name,
    pool_arguments,
    warn_pool_slots,
)
from airflow_provider_iceberg_exec.operators.lineage import OpenLineageMixin, TableLineage

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyiceberg.io import FileIO

    from airflow_provider_iceberg_exec.engine.contracts import (
        ExpireSnapshotsResult,
        OrphanDeleteResult,
        OrphanScanResult,
    )

__all__ = ["ExpireSnapshotsOperator", "OrphanDeleteOperator", "OrphanScanOperator"]

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off", "", "none", "null")


def flag(value: Any, name: str) -> bool:
    """A rendered boolean: a bool, or a string such as ``"True"`` from ``"{{ params.x }}"``.

    :raises ConfigurationError: for anything else.
    """
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    if isinstance(value, bool):
        return value
    if value is None:
        return False
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigurationError(f"{name} must be true or false, got {value!r}")


def _optional_int(value: Any, name: str) -> int | None:
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    text = optional_text(value)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise ConfigurationError(f"{name} must be an integer, got {value!r}") from None


def _snapshot_ids(value: Any) -> list[int]:
    """Rendered ``snapshot_ids``: a list, a JSON array string, or one id."""
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if not text or text in ("None", "null"):
            return []
        try:
            value = json.loads(text) if text.startswith("[") else [text]
        except ValueError as err:
            raise ConfigurationError(f"snapshot_ids is not a JSON array: {text!r}") from err
    if isinstance(value, int):
        value = [value]
    if not isinstance(value, Sequence):
        raise ConfigurationError(f"snapshot_ids must be a list of ids, got {type(value).__name__}")
    try:
        return [int(v) for v in value]
    except (TypeError, ValueError):
        raise ConfigurationError(f"snapshot_ids must be integers, got {list(value)!r}") from None


class OrphanScanOperator(CatalogHookMixin, OpenLineageMixin, BaseOperator):
    """Find the files under the table's location that no metadata references; delete nothing.

    Java's rules (``remove_orphan_files`` with ``dry_run``): only files older than ``older_than`` (default
    3 days; less than 24 hours is refused unless ``force``), hidden paths skipped, paths compared after
    ``equal_schemes`` / ``equal_authorities``, ``prefix_mismatch_mode`` ``ERROR``, ``IGNORE`` or ``DELETE``.
    A table with ``gc.enabled=false`` is refused; a listing that misses a referenced file aborts (the task
    fails and its retries apply). The orphan list is written to ``orphan_list_uri`` (default: a file named
    after the DAG run and task under ``<table>/metadata/iceberg-exec-staging/``, so a retry overwrites it);
    the result (``iceberg-exec/orphan-scan-result@1``) carries its URI for :class:`OrphanDeleteOperator`.

    :param table: the table, ``"namespace.table"`` (templated).
    :param older_than: a duration (``"3d"``, ``"72h"``) or a timestamp (templated).
    :param location: list this location instead of the table's (templated).
    :param prefix_mismatch_mode: ``ERROR``, ``IGNORE`` or ``DELETE`` (templated).
    :param equal_schemes: ``{"s3a,s3n": "s3"}``-style map added to the default; JSON accepted (templated).
    :param equal_authorities: ``{"nn1,nn2": "nn"}``-style map; JSON accepted (templated).
    :param orphan_list_uri: where to write the orphan list (templated).
    :param force: allow ``older_than`` less than 24 hours ago.
    :param memory_limit: the execution's memory limit; default ``[iceberg_exec] memory_limit`` (templated).
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection (templated).
    """

    table_lineage = TableLineage("remove-orphan-files")

    template_fields: Sequence[str] = (
        "table",
        "older_than",
        "location",
        "prefix_mismatch_mode",
        "equal_schemes",
        "equal_authorities",
        "orphan_list_uri",
        "memory_limit",
        "iceberg_exec_conn_id",
    )
    template_fields_renderers = {"equal_schemes": "json", "equal_authorities": "json"}
    partial = PoolDefaultsPartial()
    ui_color = "#e8d5f2"

    def __init__(
        self,
        *,
        table: str,
        older_than: str | None = None,
        location: str | None = None,
        prefix_mismatch_mode: str = "ERROR",
        equal_schemes: Mapping[str, str] | str | None = None,
        equal_authorities: Mapping[str, str] | str | None = None,
        orphan_list_uri: str | None = None,
        force: bool = False,
        memory_limit: str | int | None = None,
        iceberg_exec_conn_id: str = IcebergExecHook.default_conn_name,
        pool: str | None = None,
        pool_slots: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**pool_arguments(pool, pool_slots), **kwargs)
        self.table = table
        self.older_than = older_than
        self.location = location
        self.prefix_mismatch_mode = prefix_mismatch_mode
        self.equal_schemes = equal_schemes
        self.equal_authorities = equal_authorities
        self.orphan_list_uri = orphan_list_uri
        self.force = force
        self.memory_limit = memory_limit
        self.iceberg_exec_conn_id = iceberg_exec_conn_id

    def execute(self, context: Context) -> OrphanScanResult:
        """Scan and return the scan result (JSON); the orphan list is in the file it names."""
        from airflow_provider_iceberg_exec.engine.ops.orphans import scan_orphan_files

        with engine_errors():
            limits = settings.resource_limits(self.memory_limit)
            warn_pool_slots(self, limits)
            table = self.hook.load_table(self.table)
            list_uri = optional_text(self.orphan_list_uri) or self._staged_list_uri(context, table.location())
            self.log.info(
                "Scanning %s for orphan files older than %s (memory limit %s bytes); list: %s",
                self.table,
                optional_text(self.older_than) or "3 days",
                limits.memory_limit_bytes,
                list_uri,
            )
            return scan_orphan_files(
                table,
                older_than=optional_text(self.older_than),
                location=optional_text(self.location),
                equal_schemes=normalize_options(self.equal_schemes),
                equal_authorities=normalize_options(self.equal_authorities),
                prefix_mismatch_mode=optional_text(self.prefix_mismatch_mode) or "ERROR",
                orphan_list_uri=list_uri,
                force=flag(self.force, "force"),
                limits=limits,
            )

    def _staged_list_uri(self, context: Context, table_location: str) -> str:
        """The default orphan list: named after this task instance, so that a retry overwrites it."""
        from airflow_provider_iceberg_exec.engine.ops.orphans import staged_list_uri

        name = payload_name(context, task_id=self.task_id, dag_id=self.dag_id, part="orphans")
        return staged_list_uri(table_location, name)


class OrphanDeleteOperator(CatalogHookMixin, OpenLineageMixin, BaseOperator):
    """Delete the files of an orphan scan, re-checking the table before each batch.

    A file that a commit made since the scan references is kept, as is one modified since the scan's
    ``older_than``; every path must lie under the scanned locations. With ``dry_run_only`` (for example
    ``"{{ not params.remove_orphans }}"``) the files are checked and counted, not deleted.

    :param scan_result: the :class:`OrphanScanOperator`'s result (its ``.output``), or the URI of the
        result JSON or of the orphan list (templated).
    :param table: the table; default the scan result's (templated).
    :param dry_run_only: Spark's ``dry_run``: check and count, delete nothing; a bool or a rendered
        ``"True"``/``"False"`` (templated). (``dry_run`` is taken by ``BaseOperator.dry_run()``.)
    :param batch_size: paths per batch (Java's 100,000).
    :param max_concurrent_deletes: parallel deletes.
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection (templated).
    """

    table_lineage = TableLineage("remove-orphan-files", output="cleanup")

    template_fields: Sequence[str] = ("scan_result", "table", "dry_run_only", "iceberg_exec_conn_id")
    template_fields_renderers = {"scan_result": "json"}
    ui_color = "#d7b8ea"

    def __init__(
        self,
        *,
        scan_result: Mapping[str, Any] | str,
        table: str | None = None,
        dry_run_only: bool | str = False,
        batch_size: int = 100_000,
        max_concurrent_deletes: int = 8,
        iceberg_exec_conn_id: str = IcebergExecHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.scan_result = scan_result
        self.table = table
        self.dry_run_only = dry_run_only
        self.batch_size = batch_size
        self.max_concurrent_deletes = max_concurrent_deletes
        self.iceberg_exec_conn_id = iceberg_exec_conn_id

    def execute(self, context: Context) -> OrphanDeleteResult:
        """Delete (or count, in a dry run) and return the delete result (JSON)."""
        from airflow_provider_iceberg_exec.engine.ops.orphans import (
            delete_orphan_files,
            resolve_orphan_scan_result,
        )

        with engine_errors():
            dry_run = flag(self.dry_run_only, "dry_run_only")
            table_name = optional_text(self.table)
            scan = resolve_orphan_scan_result(self.scan_result, lambda uri: self._file_io(table_name, uri))
            table = self.hook.load_table(table_name or str(scan.get("table") or ""))
            self.log.info(
                "%s %s orphan files of %s listed in %s",
                "Checking (dry run)" if dry_run else "Deleting",
                scan.get("orphan_file_count"),
                scan.get("table"),
                scan.get("orphan_list_uri"),
            )
            return delete_orphan_files(
                table,
                scan,
                dry_run=dry_run,
                batch_size=int(self.batch_size),
                max_concurrent_deletes=int(self.max_concurrent_deletes),
            )

    def _file_io(self, table_name: str | None, uri: str) -> FileIO:
        """The FileIO to read a scan result at ``uri`` with: the table's, else one from the connection."""
        if table_name:
            return self.hook.load_table(table_name).io
        from pyiceberg.io import load_file_io

        return load_file_io(dict(self.hook.get_conn().properties), uri)


class ExpireSnapshotsOperator(CatalogHookMixin, OpenLineageMixin, BaseOperator):
    """Expire snapshots with Java's rules, then delete the files only the expired snapshots reached.

    Defaults follow the table's properties as in Spark: ``older_than`` is now minus
    ``history.expire.max-snapshot-age-ms`` (5 days), ``retain_last`` is
    ``history.expire.min-snapshots-to-keep`` (1); branch and tag heads are kept, ``main`` never expires,
    refs older than their ``max-ref-age-ms`` expire. A table with ``gc.enabled=false`` is refused. The
    result (``iceberg-exec/expire-snapshots-result@1``) has Java's ``deleted_*_count`` columns.

    :param table: the table, ``"namespace.table"`` (templated).
    :param older_than: a duration (``"5d"``) or a timestamp (templated).
    :param retain_last: ancestors of each branch always kept (templated).
    :param snapshot_ids: snapshots to expire regardless of age; a list, JSON array or one id (templated).
    :param cleanup: delete the files no longer reachable (templated).
    :param dry_run_only: commit and delete nothing; report what would happen (templated).
    :param max_concurrent_deletes: parallel deletes.
    :param memory_limit: the execution's memory limit; default ``[iceberg_exec] memory_limit`` (templated).
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection (templated).
    """

    table_lineage = TableLineage("expire-snapshots", output="cleanup")

    template_fields: Sequence[str] = (
        "table",
        "older_than",
        "retain_last",
        "snapshot_ids",
        "cleanup",
        "dry_run_only",
        "memory_limit",
        "iceberg_exec_conn_id",
    )
    ui_color = "#f2e2b8"
    partial = PoolDefaultsPartial()

    def __init__(
        self,
        *,
        table: str,
        older_than: str | None = None,
        retain_last: int | str | None = None,
        snapshot_ids: Sequence[int] | str | None = None,
        cleanup: bool | str = True,
        dry_run_only: bool | str = False,
        max_concurrent_deletes: int = 8,
        memory_limit: str | int | None = None,
        iceberg_exec_conn_id: str = IcebergExecHook.default_conn_name,
        pool: str | None = None,
        pool_slots: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**pool_arguments(pool, pool_slots), **kwargs)
        self.table = table
        self.older_than = older_than
        self.retain_last = retain_last
        self.snapshot_ids = snapshot_ids
        self.cleanup = cleanup
        self.dry_run_only = dry_run_only
        self.max_concurrent_deletes = max_concurrent_deletes
        self.memory_limit = memory_limit
        self.iceberg_exec_conn_id = iceberg_exec_conn_id

    def execute(self, context: Context) -> ExpireSnapshotsResult:
        """Expire and return the result (JSON)."""
        from airflow_provider_iceberg_exec.engine.ops.expire import expire_snapshots

        with engine_errors():
            limits = settings.resource_limits(self.memory_limit)
            warn_pool_slots(self, limits)
            table = self.hook.load_table(self.table)
            return expire_snapshots(
                table,
                older_than=optional_text(self.older_than),
                retain_last=_optional_int(self.retain_last, "retain_last"),
                snapshot_ids=_snapshot_ids(self.snapshot_ids),
                cleanup=flag(self.cleanup, "cleanup"),
                dry_run=flag(self.dry_run_only, "dry_run_only"),
                max_concurrent_deletes=int(self.max_concurrent_deletes),
                limits=limits,
            )

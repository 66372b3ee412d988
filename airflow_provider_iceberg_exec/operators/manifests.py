"""Manifest rewrite as an Airflow task (Spark's ``rewrite_manifests``).

A table appended to often (streaming, hourly batches) collects one small manifest per commit, and every
scan plans over all of them. :class:`IcebergRewriteManifestsOperator` rewrites the manifests of one
partition spec into ``ceil(total bytes / commit.manifest.target-size-bytes)`` manifests clustered by
partition, in one ``replace`` snapshot that changes no data::

    rewrite = IcebergRewriteManifestsOperator(task_id="rewrite_manifests", table="db.events")

The engine (``airflow_provider_iceberg_exec.engine.ops.manifests``) is imported inside ``execute()`` so that
parsing a DAG file never imports PyArrow, DataFusion or PyIceberg.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_iceberg_exec.hooks.iceberg_exec import IcebergExecHook
from airflow_provider_iceberg_exec.operators._common import (
    ASSET_ALIAS,
    CatalogHookMixin,
    PoolDefaultsPartial,
    commit_task_arguments,
    engine_errors,
    optional_text,
    task_commit_id,
)
from airflow_provider_iceberg_exec.operators.commit import emit_table_asset
from airflow_provider_iceberg_exec.operators.lineage import OpenLineageMixin, TableLineage

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_iceberg_exec.engine.contracts import RewriteManifestsResult

__all__ = ["IcebergRewriteManifestsOperator"]


class IcebergRewriteManifestsOperator(CatalogHookMixin, OpenLineageMixin, BaseOperator):
    """Rewrite a table's manifests into fewer, partition-clustered ones: Spark's ``rewrite_manifests``.

    The live entries of the current snapshot's data and delete manifests of ``spec_id`` are rewritten,
    each with its snapshot id and sequence numbers, and committed as one ``replace`` snapshot (no data
    change), validated as Java's ``RewriteManifests`` and re-planned at the head on every retry. A single
    manifest that stays one is a normal, empty result. Returns ``iceberg-exec/rewrite-manifests-result@1``
    with Spark's ``rewritten_manifests_count`` and ``added_manifests_count``.

    The commit id derives from the DAG, run and task, so a retry after a commit that landed reports it and
    succeeds; the table's asset is emitted through the ``iceberg-exec-commits`` asset alias when a snapshot
    lands; bad input (an unknown spec id or partition field, a format version above 3) fails the task
    without retry, with a one-line reason, and leaves the table unchanged.

    :param table: the table, ``"namespace.table"`` (templated).
    :param spec_id: the partition spec whose manifests are rewritten; default the current one (templated).
    :param sort_by: partition field names to cluster by, in order: a list, a JSON array or a comma-separated
        string; default all of the spec's fields (templated).
    :param target_size_bytes: the manifest size aimed at, e.g. ``"8MiB"``; default the table's
        ``commit.manifest.target-size-bytes`` (templated).
    :param branch: the branch (templated).
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection (templated).
    :param commit_id: overrides the derived commit id (templated).
    :param asset_alias: the asset alias the table's asset is emitted through; ``None`` for none.
    :param pool: the task's pool; default ``[iceberg_exec] pool``.
    :param pool_slots: the slots the task takes; default 1 (it reads and writes only manifests).
    """

    table_lineage = TableLineage("rewrite-manifests", output="commit")

    template_fields: Sequence[str] = (
        "table",
        "spec_id",
        "sort_by",
        "target_size_bytes",
        "branch",
        "iceberg_exec_conn_id",
        "commit_id",
    )
    ui_color = "#c9e4c5"
    partial = PoolDefaultsPartial()

    def __init__(
        self,
        *,
        table: str,
        spec_id: int | str | None = None,
        sort_by: Sequence[str] | str | None = None,
        target_size_bytes: int | str | None = None,
        branch: str = "main",
        iceberg_exec_conn_id: str = IcebergExecHook.default_conn_name,
        commit_id: str | None = None,
        asset_alias: str | None = ASSET_ALIAS,
        pool: str | None = None,
        pool_slots: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            **commit_task_arguments(
                kwargs, asset_alias=asset_alias, pool=pool, pool_slots=pool_slots, default_slots=1
            )
        )
        self.table = table
        self.spec_id = spec_id
        self.sort_by = sort_by
        self.target_size_bytes = target_size_bytes
        self.branch = branch
        self.iceberg_exec_conn_id = iceberg_exec_conn_id
        self.commit_id = commit_id
        self.asset_alias = asset_alias

    def execute(self, context: Context) -> RewriteManifestsResult:
        """Rewrite and commit; return the result (JSON)."""
        from airflow_provider_iceberg_exec.engine.config import parse_byte_size
        from airflow_provider_iceberg_exec.engine.ops.manifests import rewrite_manifests

        with engine_errors():
            commit_id = task_commit_id(self, context)
            target = optional_text(self.target_size_bytes)
            table = self.hook.load_table(self.table)
            result = rewrite_manifests(
                table,
                spec_id=_spec_id(self.spec_id),
                sort_by=_sort_by(self.sort_by),
                target_size_bytes=parse_byte_size(target) if target is not None else None,
                branch=optional_text(self.branch) or "main",
                commit_id=commit_id,
            )
        self.log.info(
            "%s %s: %s manifests rewritten into %s, %s kept, %s entries; snapshots %s",
            "Already committed" if result["already_committed"] else "Rewrote manifests of",
            result["table"],
            result["rewritten_manifests_count"],
            result["added_manifests_count"],
            result["kept_manifests_count"],
            result["rewritten_entries_count"],
            result["snapshot_ids"] or "none (nothing to rewrite)",
        )
        emit_table_asset(self, context, catalog=self.hook.catalog_name, table=self.table, result=result)
        return result


def _spec_id(value: Any) -> int | None:
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    text = optional_text(value)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise ConfigurationError(f"spec_id must be an integer, got {value!r}") from None


def _sort_by(value: Any) -> list[str] | None:
    """Rendered ``sort_by``: a list, a JSON array string, or comma-separated names."""
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    if value is None or isinstance(value, (list, tuple)):
        names = [str(v).strip() for v in value] if value is not None else []
    else:
        text = str(value).strip()
        if text.startswith("["):
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError as err:
                raise ConfigurationError(f"sort_by is not a JSON array: {err}") from None
            if not isinstance(parsed, list):
                raise ConfigurationError("sort_by must be a list of partition field names")
            names = [str(v).strip() for v in parsed]
        else:
            names = [part.strip() for part in text.split(",")]
    names = [name for name in names if name and name != "None"]
    return names or None

"""The commit of files produced by other tasks: one operator shared by every file-producing operation.

The rewrite tasks return results (DataFile JSON) through XCom; :class:`CommitOperator` gathers them and
commits once (or once per commit batch under partial progress), validated against the snapshot the work
was planned on. Its commit id derives from the DAG, the run and the task, never the try number: a retry
after a commit that landed finds its snapshot and reports it instead of committing twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetAlias, BaseOperator

from airflow_provider_iceberg_exec.hooks.iceberg_exec import IcebergExecHook
from airflow_provider_iceberg_exec.operators._common import (
    ASSET_ALIAS,
    commit_id_from_context,
    engine_errors,
    optional_text,
    table_asset_uri,
    with_asset_alias,
)

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyiceberg.table import Table

__all__ = ["COMMITTERS", "CommitOperator", "emit_table_asset", "empty_commit_result", "log_commit_result"]

#: result schema -> the engine function that commits a list of such results
COMMITTERS: dict[str, str] = {
    "iceberg-exec/rewrite-result@1": "airflow_provider_iceberg_exec.engine.compaction.commit_compaction",
    "iceberg-exec/cow-result@1": "airflow_provider_iceberg_exec.engine.cow.commit_cow_rewrite",
}
_RESULT_SCHEMA = "iceberg-exec/compaction-result@1"


def empty_commit_result(table: str | None) -> dict[str, Any]:
    """The result of a commit with nothing to commit."""
    return {
        "schema": _RESULT_SCHEMA,
        "table": table,
        "rewritten_data_files_count": 0,
        "added_data_files_count": 0,
        "rewritten_bytes_count": 0,
        "failed_data_files_count": 0,
        "removed_delete_files_count": 0,
        "snapshot_ids": [],
        "already_committed": False,
        "peak_rss_bytes": 0,
        "spilled_bytes": 0,
    }


def log_commit_result(operator: BaseOperator, result: Mapping[str, Any]) -> None:
    """Log a commit result in one line."""
    operator.log.info(
        "%s %s: %s data files (%s bytes) rewritten into %s; %s failed; %s delete files removed; "
        "snapshots %s; peak RSS %s bytes, spilled %s bytes",
        "Already committed" if result.get("already_committed") else "Committed",
        result.get("table"),
        result.get("rewritten_data_files_count"),
        result.get("rewritten_bytes_count"),
        result.get("added_data_files_count"),
        result.get("failed_data_files_count"),
        result.get("removed_delete_files_count"),
        result.get("snapshot_ids"),
        result.get("peak_rss_bytes"),
        result.get("spilled_bytes"),
    )


def emit_table_asset(
    operator: BaseOperator, context: Context, *, catalog: str, table: str, result: Mapping[str, Any]
) -> None:
    """Attach the table's asset event to the task's outlets when a snapshot landed.

    Through every ``AssetAlias`` outlet the asset ``iceberg://<catalog>/<namespace>/<table>`` is added (so
    a templated table still produces its asset event); a declared ``Asset`` outlet with that URI gets the
    snapshot ids as its event's extra.
    """
    snapshot_ids = [int(s) for s in result.get("snapshot_ids", []) or []]
    if not snapshot_ids and not result.get("already_committed"):
        return
    outlet_events = context.get("outlet_events")
    if outlet_events is None:
        return
    uri = table_asset_uri(catalog, table)
    extra: dict[str, Any] = {
        "table": table,
        "snapshot_ids": snapshot_ids,
        "already_committed": bool(result.get("already_committed")),
    }
    for outlet in operator.outlets:
        if isinstance(outlet, AssetAlias):
            outlet_events[outlet].add(Asset(uri=uri), extra=extra)
        elif isinstance(outlet, Asset) and outlet.uri == uri:
            outlet_events[outlet].extra.update(extra)
    operator.log.info("Asset %s updated (snapshots %s)", uri, snapshot_ids)


def _flatten(results: Any) -> list[Mapping[str, Any]]:
    if results is None:
        return []
    if isinstance(results, Mapping):
        return [results]
    out: list[Mapping[str, Any]] = []
    if isinstance(results, Sequence) and not isinstance(results, str):
        # index a (lazy) XCom sequence by its length: iterating it probes one item past the end
        items: Iterable[Any] = [results[index] for index in range(len(results))]
    elif isinstance(results, Iterable) and not isinstance(results, str):
        items = results
    else:
        items = [results]
    for item in items:
        if item is None:
            continue  # a mapped task that returned nothing
        if isinstance(item, Mapping):
            out.append(item)
        elif isinstance(item, Iterable) and not isinstance(item, str):
            out.extend(_flatten(item))
        else:
            out.append({"schema": None, "value": item})
    return out


class CommitOperator(BaseOperator):
    """Commit the results of file-producing tasks (e.g. the mapped rewrite) in one snapshot.

    Validated against the plan's base snapshot (carried in each result); one snapshot per commit batch
    when partial progress is enabled. No results (an empty plan) is success with an empty result. On a
    commit conflict (the table moved) the task fails and its ``retries`` apply, with exponential backoff;
    a failed validation, bad input or an unknown commit state fails it without retry.

    The table's asset ``iceberg://<catalog>/<namespace>/<table>`` is emitted through the asset alias
    ``asset_alias`` (default ``iceberg-exec-commits``) when a snapshot lands; schedule downstream DAGs on
    that asset (see :func:`airflow_provider_iceberg_exec.operators.table_asset`).

    :param results: the results to commit, usually ``rewrite.output`` of a mapped task (templated).
    :param table: the table; default the results' (templated).
    :param iceberg_exec_conn_id: the ``iceberg_exec`` connection (templated).
    :param commit_id: overrides the commit id derived from the DAG, run and task (templated).
    :param quiet_period_seconds: when > 0, commit only once the branch has had no new snapshot for this
        long (re-checked after waiting), for tables with busy writers (templated).
    :param quiet_period_timeout_seconds: give up waiting for quiet after this long; the task then fails
        with a commit conflict and retries (templated).
    :param cleanup_staged: delete the staged payload files of the results after the commit.
    :param asset_alias: the asset alias the table's asset is emitted through; ``None`` for none.
    """

    template_fields: Sequence[str] = (
        "results",
        "table",
        "iceberg_exec_conn_id",
        "commit_id",
        "quiet_period_seconds",
        "quiet_period_timeout_seconds",
    )
    template_fields_renderers = {"results": "json"}
    ui_color = "#5aa7eb"

    def __init__(
        self,
        *,
        results: Any,
        table: str | None = None,
        iceberg_exec_conn_id: str = IcebergExecHook.default_conn_name,
        commit_id: str | None = None,
        quiet_period_seconds: float | str = 0.0,
        quiet_period_timeout_seconds: float | str = 3600.0,
        cleanup_staged: bool = True,
        asset_alias: str | None = ASSET_ALIAS,
        retries: int = 3,
        retry_delay: timedelta | float = timedelta(seconds=15),
        retry_exponential_backoff: float = 2.0,
        max_retry_delay: timedelta | float = timedelta(minutes=10),
        **kwargs: Any,
    ) -> None:
        super().__init__(
            outlets=with_asset_alias(kwargs.pop("outlets", None), asset_alias),
            retries=retries,
            retry_delay=retry_delay,
            retry_exponential_backoff=retry_exponential_backoff,
            max_retry_delay=max_retry_delay,
            **kwargs,
        )
        self.results = results
        self.table = table
        self.iceberg_exec_conn_id = iceberg_exec_conn_id
        self.commit_id = commit_id
        self.quiet_period_seconds = quiet_period_seconds
        self.quiet_period_timeout_seconds = quiet_period_timeout_seconds
        self.cleanup_staged = cleanup_staged
        self.asset_alias = asset_alias

    @cached_property
    def hook(self) -> IcebergExecHook:
        """The catalog hook, built after the templates are rendered."""
        return IcebergExecHook(iceberg_exec_conn_id=self.iceberg_exec_conn_id)

    def execute(self, context: Context) -> dict[str, Any]:
        """Commit the results; return the commit result JSON."""
        from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, DataFileCodecError
        from airflow_provider_iceberg_exec.engine.payloads import resolve_payload

        docs = _flatten(self.results)
        table_name = optional_text(self.table)
        if not docs:
            self.log.info("Nothing to commit to %s: no results (the plan had nothing to do)", table_name)
            return empty_commit_result(table_name)
        staged = _staged_uris(docs)
        with engine_errors():
            names = {str(d["table"]) for d in docs if d.get("table")}
            if table_name is None and len(names) == 1:
                table_name = names.pop()
            elif table_name is None or names - {table_name}:
                raise ConfigurationError(
                    f"results name tables {sorted(names)}; one commit commits to one table ({table_name!r})"
                )
            commit_id = optional_text(self.commit_id) or commit_id_from_context(
                context, task_id=self.task_id, dag_id=self.dag_id
            )
            table = self.hook.load_table(table_name)
            try:
                resolved = [
                    resolve_payload(table.io, {k: v for k, v in d.items() if k != "staged_inputs"})
                    for d in docs
                ]
            except DataFileCodecError:
                # A staged payload is gone: a previous try committed and cleaned up, then failed.
                landed = _landed_snapshot_ids(table, commit_id)
                if not landed:
                    raise
                self.log.info("Commit %s already landed as snapshots %s", commit_id, landed)
                reported = {
                    **empty_commit_result(table_name),
                    "snapshot_ids": landed,
                    "already_committed": True,
                }
                emit_table_asset(
                    self, context, catalog=self.hook.catalog_name, table=table_name, result=reported
                )
                return reported
            schemas = {str(r.get("schema")) for r in resolved}
            if len(schemas) != 1 or next(iter(schemas)) not in COMMITTERS:
                raise DataFileCodecError(
                    f"cannot commit results of schemas {sorted(schemas)}; "
                    f"expected one of {sorted(COMMITTERS)}"
                )
            committer = _import_callable(COMMITTERS[schemas.pop()])
            self.log.info(
                "Committing %s results (%s data files added) to %s with commit id %s",
                len(resolved),
                sum(len(r.get("added_data_files", []) or []) for r in resolved),
                table_name,
                commit_id,
            )
            quiet = float(self.quiet_period_seconds or 0)
            if quiet > 0:
                branch = str(resolved[0].get("branch") or "main")
                self._wait_for_quiet(table, branch, quiet, float(self.quiet_period_timeout_seconds))
            result: dict[str, Any] = committer(table, resolved, commit_id=commit_id)
        log_commit_result(self, result)
        if self.cleanup_staged and staged:
            self._discard(table, staged)
        emit_table_asset(self, context, catalog=self.hook.catalog_name, table=table_name, result=result)
        return result

    def _wait_for_quiet(self, table: Table, branch: str, quiet: float, timeout: float) -> None:
        """Wait until ``branch`` has had no new snapshot for ``quiet`` seconds, re-checking after waiting.

        :raises CommitConflictError: when the branch does not go quiet within ``timeout`` seconds.
        """
        from airflow_provider_iceberg_exec.engine.errors import CommitConflictError

        deadline = time.monotonic() + timeout
        while True:
            table.refresh()
            head = table.snapshot_by_name(branch)
            if head is None:
                return
            age = time.time() - head.timestamp_ms / 1000.0
            if age >= quiet:
                self.log.info("Branch %s quiet for %.0f s (>= %.0f s); committing", branch, age, quiet)
                return
            wait = quiet - age
            if time.monotonic() + wait > deadline:
                raise CommitConflictError(
                    f"branch {branch!r} had a new snapshot {age:.0f} s ago and did not go quiet for "
                    f"{quiet:.0f} s within {timeout:.0f} s"
                )
            self.log.info(
                "Branch %s had snapshot %s %.0f s ago; waiting %.0f s for a quiet period of %.0f s",
                branch,
                head.snapshot_id,
                age,
                wait,
                quiet,
            )
            time.sleep(wait)

    def _discard(self, table: Table, uris: Iterable[str]) -> None:
        for uri in uris:
            try:
                table.io.delete(uri)
            except OSError as err:  # cleanup is best effort: the commit has landed
                self.log.warning("Could not delete staged payload %s: %s", uri, err)


def _landed_snapshot_ids(table: Table, commit_id: str) -> list[int]:
    """Ids of the snapshots committed under ``commit_id`` (or its per-batch ids ``<commit_id>.<n>``)."""
    from airflow_provider_iceberg_exec.engine.commit import COMMIT_ID_PROPERTY

    table.refresh()
    landed = []
    for snapshot in table.metadata.snapshots:
        found = snapshot.summary.get(COMMIT_ID_PROPERTY) if snapshot.summary is not None else None
        if found is not None and (found == commit_id or found.startswith(f"{commit_id}.")):
            landed.append(snapshot.snapshot_id)
    return landed


def _staged_uris(docs: Iterable[Mapping[str, Any]]) -> list[str]:
    from airflow_provider_iceberg_exec.engine.payloads import is_payload_ref

    uris: list[str] = []
    for doc in docs:
        if is_payload_ref(doc):
            uris.append(str(doc["uri"]))
        uris.extend(str(u) for u in doc.get("staged_inputs", []) or [])
    return uris


def _import_callable(path: str) -> Any:
    import importlib

    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)

"""OpenLineage for the operators: the table as the input and output dataset of every task (docs/lineage.md).

Airflow's OpenLineage provider (the optional extra ``openlineage``) calls
``get_openlineage_facets_on_start``, ``..._on_complete`` and ``..._on_failure`` on an operator around its
``execute()``, in a fork of the task process. :class:`OpenLineageMixin` implements them once; an operator
says only what differs, in its ``table_lineage`` attribute (:class:`TableLineage`): the kind of change, and
whether the table is an output (a commit, or a clean-up of snapshots or files) or only read.

What is reported:

- the dataset is named after the table's location, by OpenLineage's conventions for file systems and
  object stores (namespace ``scheme://authority``, name the path), as OpenLineage's Spark integration names
  an Iceberg table, so that the same table written by Spark and maintained here is one dataset; a
  ``symlinks`` facet adds the catalog name ``iceberg://<catalog>`` / ``<namespace>.<table>``;
- ``schema`` (the Iceberg schema, nested fields included), ``version`` (the snapshot id: the one the task
  read on the input, the one it committed on the output), ``catalog`` and ``storage``;
- on a commit's output, ``outputStatistics``: rows, bytes and files added by the committed snapshots
  (their Iceberg summaries: ``added-records``, ``added-files-size``, ``added-data-files`` +
  ``added-delete-files``);
- the run facet ``icebergExec``: the operation, whether it changes rows, the snapshots before and after
  and the result's counters.

Nothing here imports OpenLineage or the engine at import time, so DAG parsing costs nothing without the
provider; and no failure in lineage code fails a task: each method logs it and returns nothing.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from pyiceberg.table import Table

    from airflow_provider_iceberg_exec.hooks.iceberg_exec import IcebergExecHook

__all__ = [
    "FACET_NAME",
    "OpenLineageMixin",
    "TableLineage",
    "dataset_identifier",
    "schema_fields",
    "snapshot_statistics",
]

log = logging.getLogger(__name__)

_FacetMethod = Callable[..., "OperatorLineage[Any, Any] | None"]

#: the key of the run facet that says what the task did to the table
FACET_NAME = "icebergExec"
#: where the run facet's JSON schema is described (shipped as ``docs/lineage.md``)
FACET_SCHEMA_URL = "urn:airflow-provider-iceberg-exec:facets:IcebergExecRunFacet:1"
#: the operations that change the table's rows; every other one rewrites files or metadata only
ROW_CHANGING = frozenset({"delete", "update", "overwrite", "merge", "upsert"})
#: a commit result's schema id -> the operation it commits
_COMMITTED_OPERATION = {
    "iceberg-exec/compaction-result@1": "compaction",
    "iceberg-exec/rewrite-position-deletes-result@1": "rewrite-position-deletes",
    "iceberg-exec/convert-result@1": "convert-equality-deletes",
    "iceberg-exec/rewrite-manifests-result@1": "rewrite-manifests",
    "iceberg-exec/merge-result@1": "merge",
}
#: object stores, whose dataset names are keys (no leading slash); file systems keep the absolute path
_OBJECT_STORES = frozenset({"s3", "gs", "abfss", "wasbs", "oss", "r2"})
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}


class TableLineage(NamedTuple):
    """What an operator does to its table, for lineage.

    :param operation: the kind of change (``compaction``, ``rewrite-manifests``, ``copy-on-write`` ...);
        ``None`` for the commit, whose results say; ``copy-on-write`` is reported as the planned
        ``delete``, ``update`` or ``overwrite``.
    :param output: ``""`` when the task only reads the table (plans, mapped tasks, orphan scan);
        ``"commit"`` when it commits snapshots (the output carries the committed snapshot and its
        statistics); ``"cleanup"`` when it removes snapshots or files and writes no data (expiry, orphan
        removal).
    """

    operation: str | None
    output: str = ""


def dataset_identifier(location: str) -> tuple[str, str]:
    """OpenLineage's ``(namespace, name)`` of the table at ``location``, by the file-system conventions.

    >>> dataset_identifier("s3a://bucket/warehouse/db/events/")
    ('s3://bucket', 'warehouse/db/events')
    >>> dataset_identifier("file:///tmp/wh/db/events")
    ('file', '/tmp/wh/db/events')
    >>> dataset_identifier("/tmp/wh/db/events")
    ('file', '/tmp/wh/db/events')
    >>> dataset_identifier("hdfs://nn:8020/wh/db/events")
    ('hdfs://nn:8020', '/wh/db/events')
    """
    parts = urlsplit(location.rstrip("/"))
    scheme = _SCHEME_ALIASES.get(parts.scheme.lower(), parts.scheme.lower())
    if scheme in ("", "file"):
        return ("file", parts.path) if not parts.netloc else (f"file://{parts.netloc}", parts.path)
    path = parts.path.lstrip("/") if scheme in _OBJECT_STORES else parts.path
    return f"{scheme}://{parts.netloc}", path


def schema_fields(schema: Any) -> list[dict[str, Any]]:
    """An Iceberg schema (or struct) as OpenLineage schema fields: ``name``, ``type``, ``description``,
    and ``fields`` for a struct (of a column, or of a list's element or a map's value)."""
    from pyiceberg.types import ListType, MapType, StructType

    out: list[dict[str, Any]] = []
    for field in schema.fields:
        entry: dict[str, Any] = {"name": field.name, "type": str(field.field_type)}
        if field.doc:
            entry["description"] = field.doc
        inner = field.field_type
        if isinstance(inner, ListType):
            inner = inner.element_type
        elif isinstance(inner, MapType):
            inner = inner.value_type
        if isinstance(inner, StructType):
            entry["fields"] = schema_fields(inner)
        out.append(entry)
    return out


def snapshot_statistics(table: Table, snapshot_ids: Sequence[int]) -> dict[str, int]:
    """Rows, bytes and files that the snapshots ``snapshot_ids`` added, from their Iceberg summaries."""
    totals = {"rows": 0, "bytes": 0, "files": 0}
    for snapshot_id in snapshot_ids:
        snapshot = table.snapshot_by_id(snapshot_id)
        summary = snapshot.summary if snapshot is not None else None
        if summary is None:
            continue
        totals["rows"] += int(summary.get("added-records") or 0)
        totals["bytes"] += int(summary.get("added-files-size") or 0)
        files = int(summary.get("added-data-files") or 0) + int(summary.get("added-delete-files") or 0)
        totals["files"] += files
    return totals


def _keep_result(execute: Callable[..., Any]) -> Callable[..., Any]:
    """``execute`` that also keeps its result on the task, for the facets of the COMPLETE event."""

    @functools.wraps(execute)
    def execute_keeping_result(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = execute(self, *args, **kwargs)
        self._lineage_result = result
        return result

    return execute_keeping_result


def _safely(method: _FacetMethod) -> _FacetMethod:
    """OpenLineage's contract: a facet method never raises; a failure is logged and reports nothing."""

    @functools.wraps(method)
    def never_raising(self: Any, *args: Any) -> OperatorLineage[Any, Any] | None:
        try:
            return method(self, *args)
        except Exception as err:  # lineage must never fail the task
            log.warning("No lineage for task %s: %s", getattr(self, "task_id", "?"), err, exc_info=True)
            return None

    return never_raising


class OpenLineageMixin:
    """The OpenLineage facet methods of the operators (mixed in before ``BaseOperator``).

    A subclass sets :attr:`table_lineage`; its ``execute()`` is wrapped so that its result stays on the
    task for the COMPLETE event (the provider calls the facet methods in a fork of the task process,
    after ``execute()``, so the result needs no XCom round trip). Each method reports from the task the
    runner executed (:func:`_executed`: on Airflow 3.1 not the one it is called on).
    """

    table_lineage: ClassVar[TableLineage] = TableLineage(None)
    _lineage_result: Any = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        execute = cls.__dict__.get("execute")
        if callable(execute):
            cls.execute = _keep_result(execute)  # type: ignore[attr-defined]

    @_safely
    def get_openlineage_facets_on_start(self) -> OperatorLineage[Any, Any] | None:
        """The table at its current snapshot as the input (and, for a committing task, the output)."""
        return _executed(self, None)._lineage_on_start()

    @_safely
    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage[Any, Any] | None:
        """The table before (the snapshot read) and after (the snapshot committed), with statistics."""
        return _executed(self, task_instance)._lineage_on_complete()

    @_safely
    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage[Any, Any] | None:
        """A failed task read the table; what it committed, if anything, its retry reports."""
        return _executed(self, task_instance)._lineage_on_failure()

    def _lineage_on_start(self) -> OperatorLineage[Any, Any] | None:
        name = self._lineage_table_name(None)
        if not name:
            return None
        table = _hook(self).load_table(name)
        head = _head_snapshot_id(table, self._lineage_branch(None))
        outputs = [_dataset(self, table, name, None, output=True)] if self.table_lineage.output else []
        return _operator_lineage(
            inputs=[_dataset(self, table, name, head)],
            outputs=outputs,
            run_facets={FACET_NAME: _run_facet(self, name, None, before=head, committed=[])},
        )

    def _lineage_on_complete(self) -> OperatorLineage[Any, Any] | None:
        """Without the result of ``execute()`` no snapshot is known for sure: no version is reported
        rather than the head, which after a commit is not the snapshot read."""
        result = self._lineage_result
        name = self._lineage_table_name(result)
        if not name:
            return None
        table = _hook(self).load_table(name)
        branch = self._lineage_branch(result)
        committed = _committed_snapshot_ids(result) if self.table_lineage.output == "commit" else []
        before = _snapshot_before(table, result, committed, branch) if result is not None else None
        return _operator_lineage(
            inputs=[_dataset(self, table, name, before)],
            outputs=self._lineage_outputs(table, name, result, committed, branch),
            run_facets={FACET_NAME: _run_facet(self, name, result, before=before, committed=committed)},
        )

    def _lineage_on_failure(self) -> OperatorLineage[Any, Any] | None:
        name = self._lineage_table_name(None)
        if not name:
            return None
        table = _hook(self).load_table(name)
        head = _head_snapshot_id(table, self._lineage_branch(None))
        return _operator_lineage(inputs=[_dataset(self, table, name, head)], outputs=[], run_facets={})

    def _lineage_outputs(
        self, table: Table, name: str, result: Any, committed: list[int], branch: str
    ) -> list[Any]:
        """The table after the task: at its last commit (with what it added), or at the head after a
        clean-up; nothing when the task only reads or ran dry."""
        if not self.table_lineage.output or (isinstance(result, Mapping) and result.get("dry_run") is True):
            return []
        if result is None:  # what the task did is not known: the table, at no version
            return [_dataset(self, table, name, None, output=True)]
        if self.table_lineage.output == "commit":
            after = committed[-1] if committed else _head_snapshot_id(table, branch)
            stats = snapshot_statistics(table, committed)
            return [_dataset(self, table, name, after, output=True, statistics=stats)]
        return [_dataset(self, table, name, _head_snapshot_id(table, branch), output=True)]

    def _lineage_table_name(self, result: Any) -> str | None:
        """The table: the task's ``table``, else its result's, else its input document's."""
        from airflow_provider_iceberg_exec.operators._common import optional_text

        candidates = [getattr(self, "table", None), result]
        for attribute in ("task_spec", "scan_result", "results", "planned"):
            candidates.append(getattr(self, attribute, None))
        for candidate in candidates:
            name = optional_text(_table_of(candidate))
            if name:
                return name
        return None

    def _lineage_branch(self, result: Any) -> str:
        from airflow_provider_iceberg_exec.operators._common import optional_text

        branch = result.get("branch") if isinstance(result, Mapping) else None
        return optional_text(branch) or optional_text(getattr(self, "branch", None)) or "main"

    def _lineage_operation(self, result: Any) -> str:
        """The kind of change: the operator's, the commit's result's, or copy-on-write's planned one."""
        from airflow_provider_iceberg_exec.operators._common import optional_text

        operation = self.table_lineage.operation
        doc = _first_document(result) or _first_document(getattr(self, "task_spec", None)) or {}
        if operation is None:
            operation = _COMMITTED_OPERATION.get(str(doc.get("schema")), "copy-on-write")
        if operation == "copy-on-write":
            planned = doc.get("operation") or getattr(self, "operation", None)
            operation = optional_text(planned) or operation
        return operation


def _executed(operator: OpenLineageMixin, task_instance: Any) -> OpenLineageMixin:
    """The copy of ``operator`` that the task runner rendered and executed (``ti.task``), else ``operator``.

    Airflow 3.1's task runner renders and executes a copy of the task (``prepare_for_execution()``), but
    its context, from which the OpenLineage listener takes the task whose methods it calls, still holds the
    task from before the copy: templates unrendered, no ``execute()`` result. (From 3.2 the runner puts
    the copy in the context, and this is ``operator`` itself.) The task instance is the COMPLETE and FAIL
    methods' argument; START has none, but runs within the task's current context.
    """
    if task_instance is None:
        task_instance = _current_task_instance()
    task = getattr(task_instance, "task", None)
    if task is not operator and type(task) is type(operator) and task.task_id == operator.task_id:  # type: ignore[attr-defined]
        return task
    return operator


def _current_task_instance() -> Any:
    """The running task's instance, or ``None`` outside a running task (the methods called directly)."""
    from airflow.sdk import get_current_context

    try:
        return get_current_context().get("ti")
    except RuntimeError:  # no task is running
        return None


def _hook(operator: Any) -> IcebergExecHook:
    """The operator's catalog hook (every operator has one, built after its templates are rendered)."""
    hook: IcebergExecHook = operator.hook
    return hook


def _table_of(value: Any) -> Any:
    if isinstance(value, str) or value is None:
        return value
    doc = _first_document(value)
    return doc.get("table") if doc is not None else None


def _first_document(value: Any) -> Mapping[str, Any] | None:
    """``value`` if it is a JSON object, else the first object of a (nested) list of them."""
    if isinstance(value, Mapping):
        return value
    if isinstance(value, Sequence) and not isinstance(value, str):
        for index in range(len(value)):  # index a lazy XCom sequence; iterating probes past the end
            doc = _first_document(value[index])
            if doc is not None:
                return doc
    return None


def _committed_snapshot_ids(result: Any) -> list[int]:
    ids = result.get("snapshot_ids") if isinstance(result, Mapping) else None
    return [int(snapshot_id) for snapshot_id in ids or []]


def _head_snapshot_id(table: Table, branch: str) -> int | None:
    snapshot = table.snapshot_by_name(branch)
    return snapshot.snapshot_id if snapshot is not None else None


def _snapshot_before(table: Table, result: Any, committed: list[int], branch: str) -> int | None:
    """The snapshot the task read: the parent of its first commit, else the one it planned on, else the
    branch head."""
    if committed:
        first = table.snapshot_by_id(committed[0])
        if first is not None:
            return first.parent_snapshot_id
    doc = _first_document(result)
    if doc is not None:
        plan = doc.get("plan")
        base = plan.get("base_snapshot_id") if isinstance(plan, Mapping) else doc.get("base_snapshot_id")
        if isinstance(base, int):
            return base
    return _head_snapshot_id(table, branch)


def _counters(result: Any) -> dict[str, int]:
    """The result's integer counters (``*_count``, rows, records, bytes), as the task returned them."""
    if not isinstance(result, Mapping):
        return {}
    return {
        str(key): int(value)
        for key, value in result.items()
        if isinstance(value, int)
        and not isinstance(value, bool)
        and str(key).endswith(("_count", "_rows", "_records", "_bytes"))
    }


def _operator_lineage(
    *, inputs: list[Any], outputs: list[Any], run_facets: dict[str, Any]
) -> OperatorLineage[Any, Any]:
    from airflow.providers.openlineage.extractors import OperatorLineage

    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets=run_facets)


def _dataset(
    operator: Any,
    table: Table,
    name: str,
    snapshot_id: int | None,
    *,
    output: bool = False,
    statistics: dict[str, int] | None = None,
) -> Any:
    """The table as an OpenLineage input (or ``output``) dataset at ``snapshot_id``."""
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import dataset_version_dataset as version
    from openlineage.client.facet_v2 import output_statistics_output_dataset as output_statistics

    namespace, path = dataset_identifier(table.location())
    facets = _dataset_facets(operator, table, name)
    if snapshot_id is not None:
        facets["version"] = version.DatasetVersionDatasetFacet(datasetVersion=str(snapshot_id))
    if not output:
        return InputDataset(namespace=namespace, name=path, facets=facets)
    output_facets: dict[str, Any] = {}
    if statistics is not None:
        output_facets["outputStatistics"] = output_statistics.OutputStatisticsOutputDatasetFacet(
            rowCount=statistics["rows"], size=statistics["bytes"], fileCount=statistics["files"]
        )
    return OutputDataset(namespace=namespace, name=path, facets=facets, outputFacets=output_facets)


def _dataset_facets(operator: Any, table: Table, name: str) -> dict[str, Any]:
    """The facets of the table whatever its version: schema, catalog name (symlink), catalog, storage."""
    from openlineage.client.facet_v2 import catalog_dataset, schema_dataset, storage_dataset, symlinks_dataset

    catalog = _hook(operator).catalog_name
    symlink = symlinks_dataset.Identifier(namespace=f"iceberg://{catalog}", name=name, type="TABLE")
    return {
        "schema": schema_dataset.SchemaDatasetFacet(fields=_schema_facet_fields(table.schema())),
        "symlinks": symlinks_dataset.SymlinksDatasetFacet(identifiers=[symlink]),
        "catalog": catalog_dataset.CatalogDatasetFacet(
            framework="iceberg",
            type=str(_hook(operator).catalog_config.properties.get("type") or "unknown"),
            name=catalog,
            source="airflow-provider-iceberg-exec",
        ),
        "storage": storage_dataset.StorageDatasetFacet(
            storageLayer="iceberg", fileFormat=table.properties.get("write.format.default", "parquet")
        ),
    }


def _schema_facet_fields(schema: Any) -> list[Any]:
    from openlineage.client.facet_v2 import schema_dataset

    def build(entry: dict[str, Any]) -> Any:
        nested = [build(child) for child in entry.get("fields", [])] or None
        return schema_dataset.SchemaDatasetFacetFields(
            name=entry["name"], type=entry["type"], description=entry.get("description"), fields=nested
        )

    return [build(entry) for entry in schema_fields(schema)]


def _run_facet(operator: Any, name: str, result: Any, *, before: int | None, committed: list[int]) -> Any:
    """The ``icebergExec`` run facet: what the task did to the table."""
    operation = operator._lineage_operation(result)
    return _facet_class()(
        operation=operation,
        changesRows=operation in ROW_CHANGING,
        table=name,
        catalog=_hook(operator).catalog_name,
        snapshotIdBefore=before,
        committedSnapshotIds=committed,
        alreadyCommitted=bool(isinstance(result, Mapping) and result.get("already_committed")),
        counters=_counters(result),
    )


@functools.cache
def _facet_class() -> type:
    """The ``icebergExec`` run facet class, defined on first use: it subclasses OpenLineage's RunFacet."""
    from attrs import define, field
    from openlineage.client.facet_v2 import RunFacet

    @define
    class IcebergExecRunFacet(RunFacet):
        """What one task did to its Iceberg table (docs/lineage.md describes every field).

        OpenLineage facets are camelCase: ``operation`` (``compaction``, ``delete``, ...), ``changesRows``,
        ``table`` in ``catalog``, ``snapshotIdBefore`` (the snapshot read), ``committedSnapshotIds`` (in
        order; empty: nothing committed), ``alreadyCommitted`` (a retry found its commit landed) and
        ``counters`` (the integer counters of the task's result JSON, by their result names).
        """

        operation: str
        changesRows: bool
        table: str
        catalog: str
        snapshotIdBefore: int | None = None
        committedSnapshotIds: list[int] = field(factory=list)
        alreadyCommitted: bool = False
        counters: dict[str, int] = field(factory=dict)

        _additional_skip_redact: ClassVar[list[str]] = [
            "operation",
            "changesRows",
            "snapshotIdBefore",
            "committedSnapshotIds",
        ]

        @staticmethod
        def _get_schema() -> str:
            return FACET_SCHEMA_URL

    return IcebergExecRunFacet

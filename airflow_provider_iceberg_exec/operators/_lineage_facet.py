"""The ``icebergExec`` OpenLineage run facet; imported only when the OpenLineage provider emits an event."""

from __future__ import annotations

from attrs import define, field
from openlineage.client.facet_v2 import RunFacet

from airflow_provider_iceberg_exec.operators.lineage import FACET_SCHEMA_URL

__all__ = ["IcebergExecRunFacet"]


@define
class IcebergExecRunFacet(RunFacet):
    """What one task did to its Iceberg table (docs/lineage.md describes every field).

    :param operation: ``compaction``, ``delete``, ``update``, ``rewrite-manifests`` ...
    :param changesRows: whether the operation changes the table's rows (copy-on-write delete, update,
        overwrite); compaction, delete-file and manifest maintenance, expiry and orphan removal do not.
    :param table: ``namespace.table`` in the catalog ``catalog``.
    :param snapshotIdBefore: the snapshot the task read (``None`` for an empty table).
    :param committedSnapshotIds: the snapshots the task committed, in order (empty: it committed nothing).
    :param alreadyCommitted: a retry found its commit already landed.
    :param counters: the integer counters of the task's result JSON, by their result names.
    """

    operation: str
    changesRows: bool  # OpenLineage facets are camelCase
    table: str
    catalog: str
    snapshotIdBefore: int | None = None
    committedSnapshotIds: list[int] = field(factory=list)
    alreadyCommitted: bool = False
    counters: dict[str, int] = field(factory=dict)

    _additional_skip_redact = ["operation", "changesRows", "snapshotIdBefore", "committedSnapshotIds"]

    @staticmethod
    def _get_schema() -> str:
        return FACET_SCHEMA_URL

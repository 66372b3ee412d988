"""Equality-delete resolution: rewrite the data files equality deletes apply to, with the deletes applied.

One ``replace`` commit swaps those files for their live rows and drops the equality delete files that no
longer apply to any live data file (with the position deletes and DVs of the rewritten files). Afterwards
readers without equality-delete support (PyIceberg 0.12) can read the table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.ops.compaction import compact

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    from airflow_provider_iceberg_exec.engine.contracts import CompactionResult

__all__ = ["resolve_equality_deletes"]


def resolve_equality_deletes(
    table: Table,
    *,
    where: str | None = None,
    limits: ResourceLimits | None = None,
    commit_id: str | None = None,
    branch: str = "main",
    options: dict[str, str] | None = None,
) -> CompactionResult:
    """Rewrite every data file that an equality delete applies to and commit ``replace``.

    Every such file is rewritten (``rewrite-all``), grouped by partition, each group in one bounded
    execution (the anti-join against the equality deletes spills); equality deletes that then apply to
    nothing are removed in the same snapshot.

    :param where: a PyIceberg row filter limiting the data files considered.
    :param options: further Spark ``rewrite_data_files`` options (for example ``target-file-size-bytes``).
    :returns: the ``iceberg-exec/compaction-result@1`` document (``removed_delete_files_count`` counts
        the delete files dropped).
    :raises ConfigurationError: for bad options, or a format version or v3 feature the writers do not
        support (table left unchanged). On v3 the rewrite carries row lineage and the DVs of the
        rewritten files go in the same commit, as in compaction.
    :raises CommitValidationError: when the table changed in a conflicting way; run it again.

    A table without equality deletes (PyIceberg writes none) has nothing to resolve:

    >>> import tempfile, pyarrow as pa
    >>> from pyiceberg.catalog.sql import SqlCatalog
    >>> from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    >>> workdir = tempfile.TemporaryDirectory()
    >>> catalog = SqlCatalog("demo", uri=f"sqlite:///{workdir.name}/c.db", warehouse=f"file://{workdir.name}")
    >>> catalog.create_namespace("ns")
    >>> table = catalog.create_table("ns.t", schema=pa.schema([("id", pa.int64())]))
    >>> table.append(pa.table({"id": [1, 2]}))
    >>> result = resolve_equality_deletes(table, limits=ResourceLimits(memory_limit_bytes=512 * 2**20))
    >>> result["removed_delete_files_count"], result["snapshot_ids"]
    (0, [])
    >>> catalog.engine.dispose(); workdir.cleanup()
    """
    return compact(
        table,
        where=where,
        options={**(options or {}), "rewrite-all": "true"},
        branch=branch,
        limits=limits,
        commit_id=commit_id,
        only_files_with_equality_deletes=True,
    )

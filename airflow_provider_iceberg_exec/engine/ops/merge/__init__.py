"""MERGE INTO and upsert, streamed within a memory limit, copy-on-write or merge-on-read.

Spark SQL's semantics (see :mod:`.clauses`): ``WHEN MATCHED [AND cond] THEN UPDATE SET ... | DELETE``,
``WHEN NOT MATCHED [AND cond] THEN INSERT ...``, ``WHEN NOT MATCHED BY SOURCE [AND cond] THEN UPDATE |
DELETE``; the first clause whose condition is true wins; the join is ``t.k = s.k`` on each ``on`` column,
so NULL keys never match; a target row matched by two source rows fails the MERGE (Spark's cardinality
check, skipped when the only MATCHED clause is an unconditional DELETE), and the table stays as it was.

Three steps that exchange JSON documents, as the other operations' do (one process: :func:`merge`; the
CLI; or Airflow tasks)::

    plan_merge -> tasks (target files to match, the source, the clauses)
    execute_merge_task per task -> result (files removed and added as content-file JSON, row counts)
    commit_merge -> one snapshot: overwrite (copy-on-write), a row delta (merge-on-read), or an append

**Bounded.** Only the key columns of the candidate target files are read to match (:mod:`.matching`):
a spilling sort-merge join of keys, split by key hash when too big. Then only the target files with a
matched row are read in full, each once, beside their matched source rows (sorted by position), and
rewritten (copy-on-write) or given position deletes (merge-on-read) (:mod:`.task`, :mod:`.outputs`).
Existing position deletes, deletion vectors and equality deletes apply first: a deleted row never
matches and is never copied.
"""

from __future__ import annotations

from airflow_provider_iceberg_exec.engine.ops.merge.commit import commit_merge
from airflow_provider_iceberg_exec.engine.ops.merge.plan import (
    DEFAULT_TASK_SIZE_BYTES,
    MERGE_MODES,
    plan_merge,
)
from airflow_provider_iceberg_exec.engine.ops.merge.run import merge, upsert
from airflow_provider_iceberg_exec.engine.ops.merge.task import execute_merge_task

__all__ = [
    "DEFAULT_TASK_SIZE_BYTES",
    "MERGE_MODES",
    "commit_merge",
    "execute_merge_task",
    "merge",
    "plan_merge",
    "upsert",
]

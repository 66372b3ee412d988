"""Copy-on-write delete, update and overwrite by predicate, streamed within a memory limit.

Three steps that exchange small JSON documents, as compaction's do (one process: :func:`cow_rewrite`; the
CLI; or Airflow tasks)::

    plan_cow_rewrite -> tasks (files to read, files to drop, Parquet files to load)
    execute_cow_task per task -> result (removed and added files as DataFile JSON, counts)
    commit_cow_rewrite -> one ``overwrite`` snapshot (``delete`` when nothing is added), Java's OverwriteFiles

Each step is a module of this package (:mod:`.plan`, :mod:`.task`, :mod:`.commit`; :mod:`.run` chains
them), on top of what they share: :mod:`.predicate` (which rows match, which files match in full),
:mod:`.update` (the ``SET`` assignments), :mod:`.read` (a data file's live rows, the Parquet files to load)
and :mod:`.common`. This module is the operation's public API.

**Which rows match.** The predicate is PyIceberg's row-filter syntax (``"user_id = 42 and day >=
'2026-01-01'"``). A row matches when the predicate is TRUE under SQL's three-valued logic: a comparison
with null is unknown, so ``x != 5`` and ``x not in (1, 2)`` never match a null ``x`` (as Spark's
``DELETE ... WHERE`` and PyIceberg's ``Table.delete`` leave such rows in place); ``not`` is pushed down to
the comparisons as PyIceberg does; NaN compares as IEEE 754 (``x > 5`` and ``x = 5`` are false for NaN,
``x != 5`` true; ``x is nan`` matches it).

**Which files are touched.** Planning reads metadata only:

- data files that cannot hold a matching row (partition and column-metrics pruning,
  :func:`~airflow_provider_iceberg_exec.engine.meta.scan.scan_data_files`) are not listed at all;
- for ``delete`` and ``overwrite``, a file in which every row matches -- provable from its partition
  (PyIceberg's strict projection) or its column metrics (PyIceberg's strict metrics evaluator), where the
  columns involved hold no null -- is removed without being read;
- every other listed file is read, first only the predicate's columns, to count its matching rows: a file
  without a match is left untouched (not rewritten, not in the commit); a file whose rows all match is
  removed (``delete``, ``overwrite``); only the others are read in full and rewritten.

**Streaming.** A rewrite reads a file with the bounded reader
(:mod:`~airflow_provider_iceberg_exec.engine.io.read`), filters each batch (or, for ``update``, evaluates
the ``SET`` expressions over its matching rows with DataFusion) and writes it with the rolling writer
(:mod:`~airflow_provider_iceberg_exec.engine.io.write`), one output per input file, so a file's layout and
sort order survive. Files are rewritten on up to one thread per core, each with one reader and one writer,
as long as the memory limit holds four writer buffers per thread. Only rows that must change partition (an
update of a partition column, files of an older spec, rows loaded by ``overwrite``) are clustered by
partition through DataFusion's spilling sort over a staged copy, as compaction does.

**Deletes.** A data file with delete files (position deletes, deletion vectors, equality deletes) is
read through :func:`~.deletes.apply.iter_live_group_batches`, as compaction
reads it: in the probe (all columns then, not only the predicate's) and in the rewrite, so a deleted row
is neither counted as matching nor copied. Such a file is never removed unread (its live row count is not
in the metadata). When it is removed or rewritten, the delete files that applied only to removed files
(its deletion vector, file-scoped position deletes, and any other delete no live file needs any more)
are removed in the same commit; those that still apply to a file left in place stay. The commit decides
which on every attempt, against the branch head it commits on (``DanglingDeletes.REWRITTEN``), so a
concurrent commit that makes a delete apply to another live file again keeps it. Files with equality
deletes are rewritten one at a time (their anti-join has a share of the memory limit of its own).
"""

from __future__ import annotations

from airflow_provider_iceberg_exec.engine.ops.cow.commit import commit_cow_rewrite
from airflow_provider_iceberg_exec.engine.ops.cow.common import COW_OPERATIONS
from airflow_provider_iceberg_exec.engine.ops.cow.plan import DEFAULT_TASK_SIZE_BYTES, plan_cow_rewrite
from airflow_provider_iceberg_exec.engine.ops.cow.run import cow_rewrite
from airflow_provider_iceberg_exec.engine.ops.cow.task import execute_cow_task

__all__ = [
    "COW_OPERATIONS",
    "DEFAULT_TASK_SIZE_BYTES",
    "commit_cow_rewrite",
    "cow_rewrite",
    "execute_cow_task",
    "plan_cow_rewrite",
]

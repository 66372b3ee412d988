"""Data-file compaction: plan groups, rewrite each group in one bounded execution, commit ``replace``.

Three steps that exchange small JSON documents, so that they can run in one process (:func:`compact`),
from the CLI, or as separate Airflow tasks:

``plan_compaction`` -> a plan with one task per file group -> ``execute_rewrite_task`` per task -> a
result per task -> ``commit_compaction`` -> one ``replace`` snapshot per commit batch.

Modules: :mod:`.plan` (``plan_compaction``), :mod:`.rewrite` (``execute_rewrite_task``), :mod:`.commit`
(``commit_compaction``) and :mod:`.run` (``compact``: the three in one call; ``execute_rewrite_tasks``: a
plan's tasks in one process, small plain groups several at a time).
"""

from __future__ import annotations

from airflow_provider_iceberg_exec.engine.ops.compaction.commit import commit_compaction
from airflow_provider_iceberg_exec.engine.ops.compaction.plan import plan_compaction
from airflow_provider_iceberg_exec.engine.ops.compaction.rewrite import execute_rewrite_task
from airflow_provider_iceberg_exec.engine.ops.compaction.run import compact, execute_rewrite_tasks

__all__ = ["commit_compaction", "compact", "execute_rewrite_task", "execute_rewrite_tasks", "plan_compaction"]

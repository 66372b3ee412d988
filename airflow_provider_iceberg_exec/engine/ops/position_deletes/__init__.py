"""Position-delete compaction, Spark's ``rewrite_position_delete_files``, on format-version 2 tables.

``plan_position_delete_rewrite`` -> a plan with one task per group of position delete files of one
partition -> ``execute_position_delete_task`` per task -> a result per task ->
``commit_position_delete_rewrite`` -> one ``replace`` snapshot per commit batch.

Modules: :mod:`.plan`, :mod:`.rewrite`, :mod:`.commit` and :mod:`.run` (``rewrite_position_deletes``: the
three in one call).
"""

from __future__ import annotations

from airflow_provider_iceberg_exec.engine.ops.position_deletes.commit import commit_position_delete_rewrite
from airflow_provider_iceberg_exec.engine.ops.position_deletes.plan import plan_position_delete_rewrite
from airflow_provider_iceberg_exec.engine.ops.position_deletes.rewrite import execute_position_delete_task
from airflow_provider_iceberg_exec.engine.ops.position_deletes.run import rewrite_position_deletes

__all__ = [
    "commit_position_delete_rewrite",
    "execute_position_delete_task",
    "plan_position_delete_rewrite",
    "rewrite_position_deletes",
]

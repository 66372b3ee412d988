"""Equality deletes -> position deletes (``convert-equality-deletes``): plan -> task per partition -> commit.

Java has only the API (``ConvertEqualityDeleteFiles``); the result names are its. See
:mod:`.plan` (what is converted), :mod:`.task` (the narrow join and the position delete files) and
:mod:`.commit` (what may be removed, the sequence numbers, the validation).
"""

from __future__ import annotations

from airflow_provider_iceberg_exec.engine.ops.convert.commit import commit_conversion, empty_convert_result
from airflow_provider_iceberg_exec.engine.ops.convert.plan import ConvertOptions, plan_conversion
from airflow_provider_iceberg_exec.engine.ops.convert.run import convert_equality_deletes
from airflow_provider_iceberg_exec.engine.ops.convert.task import convert_task

__all__ = [
    "ConvertOptions",
    "commit_conversion",
    "convert_equality_deletes",
    "convert_task",
    "empty_convert_result",
    "plan_conversion",
]

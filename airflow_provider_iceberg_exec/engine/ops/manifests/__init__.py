"""Manifest rewrite (Spark's ``rewrite_manifests``): fewer, partition-clustered manifests, no data change.

Modules: :mod:`.plan` (the pure rules: output count, key order, range boundaries), :mod:`.rewrite` (the two
streaming passes that write the new manifests at a branch head) and :mod:`.run` (``rewrite_manifests``:
the arguments, then the commit of :mod:`~airflow_provider_iceberg_exec.engine.commit.manifests`, which
re-plans at the head on every attempt).
"""

from __future__ import annotations

from airflow_provider_iceberg_exec.engine.ops.manifests.run import rewrite_manifests

__all__ = ["rewrite_manifests"]

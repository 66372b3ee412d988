"""pytest fixtures of the Java Iceberg interoperability tests. tests/interop/conftest.py imports them;
a conftest elsewhere can do the same (``from tests.interop.fixtures import *  # noqa: F403``), and its
tests should carry ``pytest.mark.spark``.

- ``spark``: one local SparkSession per test session (Java Iceberg 1.10, Hadoop catalog ``spark_cat``).
- ``java_table``: ``java_table(kind) -> metadata.json location`` of a shared, read-only table built once
  per session; ``java_table.info(kind)`` gives its :class:`BuiltTable` (name, expected ids);
  ``java_table.fresh(kind)`` builds a new private copy for a test that commits to it.
- ``spark_rows_checksum``: ``spark_rows_checksum(metadata_location) -> (count, checksum)`` read by Spark.

Register a table in a PyIceberg catalog (the ``catalog`` fixture of tests/conftest.py has namespace
``ns``) with ``catalog.register_table("ns.t", java_table(kind))``, or :func:`register_java_table`.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from tests.interop import spark as interop_spark
from tests.interop.tables import KINDS, BuiltTable, build_table

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

REQUIRE_ENV = "ICEBERG_EXEC_REQUIRE_SPARK"

# Seconds spent in setup, reported by tests/interop/conftest.py at the end of the run.
TIMINGS: dict[str, float] = {}


class JavaTables:
    """Builds each kind of Java-written table at most once per session (lazily), and fresh copies."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self._built: dict[str, BuiltTable] = {}
        self._counter = itertools.count(1)

    def __call__(self, kind: str) -> str:
        return self.info(kind).metadata_location

    def info(self, kind: str) -> BuiltTable:
        if kind not in self._built:
            started = time.perf_counter()
            self._built[kind] = build_table(self.spark, kind)
            TIMINGS[f"build {kind}"] = time.perf_counter() - started
        return self._built[kind]

    def fresh(self, kind: str) -> BuiltTable:
        """A new table of ``kind`` that no other test sees: commit to it, rewrite it, expire it."""
        if kind not in KINDS:
            raise ValueError(f"unknown Java table kind {kind!r}; one of {sorted(KINDS)}")
        return build_table(self.spark, kind, f"{kind}_fresh{next(self._counter)}")


def register_java_table(catalog: Catalog, identifier: str, metadata_location: str) -> Table:
    """Register a Java-written table in a PyIceberg catalog (creating the namespace if needed)."""
    namespace = identifier.rsplit(".", 1)[0]
    if namespace not in {".".join(ns) for ns in catalog.list_namespaces()}:
        catalog.create_namespace(namespace)
    return catalog.register_table(identifier, metadata_location)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """The session's SparkSession. Skips (or, with ICEBERG_EXEC_REQUIRE_SPARK=1, fails) when pyspark,
    snowpark-connect-deps-iceberg or Java 17 is missing."""
    reason = interop_spark.spark_available()
    if reason is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {reason}")
        pytest.skip(reason)
    started = time.perf_counter()
    interop_spark.iceberg_jars()  # builds the shaded Jackson jar unless cached
    TIMINGS["jars (shaded Jackson build unless cached)"] = time.perf_counter() - started
    saved_env = {k: os.environ.get(k) for k in interop_spark.SPARK_ENV}
    started = time.perf_counter()
    session = interop_spark.create_spark_session(tmp_path_factory.mktemp("spark"))
    TIMINGS["SparkSession start"] = time.perf_counter() - started
    try:
        yield session
    finally:
        interop_spark.stop_spark(session)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def java_table(spark: SparkSession) -> JavaTables:
    return JavaTables(spark)


@pytest.fixture(scope="session")
def spark_rows_checksum(spark: SparkSession) -> Callable[[str], tuple[int, int]]:
    def checksum(metadata_location: str) -> tuple[int, int]:
        return interop_spark.spark_rows_checksum(spark, metadata_location)

    return checksum

"""A local SparkSession with Java Iceberg 1.10 (the Spark 3.5 runtime jar from the PyPI package
snowpark-connect-deps-iceberg), and Spark as the independent reader of any Iceberg table.

Nothing here imports pyspark at module level, so that collecting the test suite works without the
``spark`` test dependencies; :func:`spark_available` says whether they and a Java runtime are there.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.interop.shade_jackson import shaded_jackson_jar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CATALOG = "spark_cat"
NAMESPACE = "db"
ICEBERG_VERSION = "1.10.2"
SCALA = "2.12"

_MASK = (1 << 64) - 1

# Environment variables create_spark_session sets (if unset) for the JVM launcher.
SPARK_ENV = ("SPARK_LOCAL_IP", "SPARK_LOCAL_DIRS", "PYSPARK_PYTHON")


def spark_available() -> str | None:
    """``None`` when a SparkSession can be created here, else the reason it cannot."""
    for module in ("pyspark", "snowpark_connect_deps_iceberg"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (the Java interop test dependencies)"
    java = java_executable()
    if java is None:
        return "no Java runtime (JAVA_HOME or java on PATH)"
    major = java_major_version(java)
    if major is None or major < 17:
        return f"Spark 3.5 here needs Java 17+, {java} is {major}"
    return None


def java_executable() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").exists():
        return str(Path(home, "bin", "java"))
    return shutil.which("java")


@lru_cache(maxsize=4)
def java_major_version(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    # 'openjdk version "17.0.15" 2025-04-15' / 'java version "1.8.0_392"'
    for line in out.splitlines():
        if "version" in line and '"' in line:
            parts = line.split('"')[1].split(".")
            return int(parts[1]) if parts[0] == "1" else int(parts[0])
    return None


def iceberg_jars() -> list[Path]:
    """The Iceberg runtime and SQL-extensions jars shipped by snowpark-connect-deps-iceberg, then the
    relocated Jackson jar they need (built once, cached)."""
    import snowpark_connect_deps_iceberg

    jars = snowpark_connect_deps_iceberg.get_jars_dir()
    return [
        jars / f"iceberg-spark-runtime-3.5_{SCALA}-{ICEBERG_VERSION}.jar",
        jars / f"iceberg-spark-extensions-3.5_{SCALA}-{ICEBERG_VERSION}.jar",
        shaded_jackson_jar(),
    ]


def create_spark_session(workdir: Path) -> SparkSession:
    """A local[2] SparkSession, small memory, no UI and no network, with the Iceberg SQL extensions and
    a Hadoop catalog ``spark_cat`` whose warehouse is ``workdir/warehouse``.

    One per process: Spark allows a single SparkContext, and starting one takes seconds.
    """
    from pyspark.sql import SparkSession

    warehouse = workdir / "warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    # Read by the launcher of the JVM: set before the first session, see SPARK_ENV.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("SPARK_LOCAL_DIRS", str(workdir))  # shuffle and spill files
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    jars = ",".join(str(p) for p in iceberg_jars())
    java_opts = "-Duser.timezone=UTC -XX:+UseSerialGC -XX:TieredStopAtLevel=1"
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("iceberg-exec-interop")
        .config("spark.jars", jars)
        .config("spark.driver.memory", "1g")
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(workdir / "spark-warehouse"))
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config(f"spark.sql.catalog.{CATALOG}", "org.apache.iceberg.spark.SparkCatalog")
        .config(f"spark.sql.catalog.{CATALOG}.type", "hadoop")
        .config(f"spark.sql.catalog.{CATALOG}.warehouse", f"file://{warehouse}")
        .config(f"spark.sql.catalog.{CATALOG}.cache-enabled", "false")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{NAMESPACE}")
    return spark


def stop_spark(spark: SparkSession) -> None:
    """Stop the session and end its JVM (pyspark keeps the JVM and its py4j gateway for the life of the
    Python process otherwise: a 1 GB heap idling through the rest of the test run)."""
    import logging

    from pyspark import SparkContext

    spark.stop()
    # py4j logs at INFO when it closes connections, also from __del__ at interpreter exit, when
    # pytest's capture streams are already closed ("--- Logging error ---").
    logging.getLogger("py4j").setLevel(logging.WARNING)
    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    if proc is not None:
        if proc.stdin is not None:
            proc.stdin.close()  # the JVM's PythonGatewayServer exits when its stdin closes
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait(timeout=30)


def java_table(spark: SparkSession, name: str) -> Any:
    """The Java ``org.apache.iceberg.Table`` of ``spark_cat.db.<name>`` (a py4j proxy), for the Java API."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession,  # type: ignore[attr-defined]
        f"{CATALOG}.{NAMESPACE}.{name}",
    )


def metadata_location(spark: SparkSession, name: str) -> str:
    """The current metadata.json of ``spark_cat.db.<name>``, as a ``file:`` URI."""
    table = java_table(spark, name)
    table.refresh()
    return str(table.operations().current().metadataFileLocation())


def _checksum_sql_expr(columns: list[str]) -> str:
    # Spark's hash functions skip null arguments: hash isnull(c) too, so that a null moving from one
    # column to another changes the checksum.
    parts = []
    for c in columns:
        q = "`" + c.replace("`", "``") + "`"
        parts += [f"isnull({q})", q]
    return f"xxhash64({', '.join(parts)})"


def spark_rows_checksum(
    spark: SparkSession, metadata_location: str, where: str | None = None
) -> tuple[int, int]:
    """``(row count, order-independent checksum)`` of the live rows of the table whose metadata.json is
    ``metadata_location`` (those ``where`` holds for, if given), read by Spark (Java Iceberg): the sum mod
    2**64 of xxhash64 over every top-level column of every row. Independent of the code under test and of
    PyIceberg."""
    df = spark.read.format("iceberg").load(metadata_location)
    if where is not None:
        df = df.where(where)
    expr = _checksum_sql_expr(df.columns)
    row = df.selectExpr("count(*) AS n", f"coalesce(sum(CAST({expr} AS DECIMAL(38,0))), 0) AS s").collect()[0]
    return int(row["n"]), int(row["s"]) & _MASK


def spark_rows(spark: SparkSession, metadata_location: str) -> list[dict[str, Any]]:
    """Every live row as a dict, sorted, in a form comparable with PyIceberg's ``to_pylist()`` after
    :func:`normalize_arrow`: top-level timestamps (with and without zone) as microseconds since the epoch,
    binary as bytes, structs as dicts. For diffing small tables, not for large ones."""
    from pyspark.sql.types import TimestampNTZType, TimestampType

    df = spark.read.format("iceberg").load(metadata_location)
    exprs = []
    for f in df.schema.fields:
        q = "`" + f.name.replace("`", "``") + "`"
        if isinstance(f.dataType, (TimestampType, TimestampNTZType)):
            # the session time zone is UTC, so a timestamp_ntz keeps its wall-clock micros
            exprs.append(f"unix_micros(CAST({q} AS TIMESTAMP)) AS {q}")
        else:
            exprs.append(q)
    rows = [_plain(r.asDict(recursive=True)) for r in df.selectExpr(*exprs).collect()]
    return sorted(rows, key=repr)


def _plain(value: Any) -> Any:
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def normalize_arrow(table: Any) -> list[dict[str, Any]]:
    """A pyarrow Table's rows in :func:`spark_rows` form (top-level timestamps as int64 micros), sorted."""
    import pyarrow as pa

    columns = []
    for field, column in zip(table.schema, table.columns, strict=True):
        if pa.types.is_timestamp(field.type):
            column = column.cast(pa.timestamp("us", tz=field.type.tz)).cast(pa.int64())
        columns.append(column)
    plain = pa.table(columns, names=table.schema.names)
    return sorted(plain.to_pylist(), key=repr)


def spark_metadata_table(spark: SparkSession, metadata_location: str, name: str) -> list[dict[str, Any]]:
    """Rows of one of Java Iceberg's metadata tables (``entries``, ``files``, ``delete_files``,
    ``manifests``, ``snapshots``, ...) of the table at ``metadata_location``, as dicts: the Java view of
    the manifests, complete for v3 (PyIceberg 0.12 drops referenced_data_file and content_offset)."""
    df = spark.read.format("iceberg").load(f"{metadata_location}#{name}")
    return [r.asDict(recursive=True) for r in df.collect()]

"""An Iceberg REST catalog on 127.0.0.1 whose server side is Java Iceberg 1.10's: RestCatalogServer.java
(next to this file) routes each request to ``org.apache.iceberg.rest.CatalogHandlers`` over a
``HadoopCatalog``, so Java checks every commit's requirements, applies its updates (v3 rules included:
``first-row-id`` >= ``next-row-id``, ``added-rows`` required) and writes the metadata JSON into the
warehouse. A PyIceberg ``RestCatalog`` talks to it; the server and its routes are ours, the catalog logic
is Java's.

The Java class is compiled with ``javac`` against the Iceberg runtime jar on first use and cached under
the interop cache directory (keyed by the source and the jars), like the shaded Jackson jar.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

import pytest

from tests.interop.fixtures import REQUIRE_ENV, TIMINGS
from tests.interop.shade_jackson import cache_dir
from tests.interop.spark import CATALOG, iceberg_jars, java_executable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SOURCE = Path(__file__).with_name("RestCatalogServer.java")
MAIN_CLASS = "org.apache.iceberg.rest.RestCatalogServer"
START_TIMEOUT_S = 120


def _classpath_jars() -> list[Path]:
    """The Iceberg runtime jar, the relocated Jackson it needs, and PySpark's jars (Hadoop, for
    ``HadoopFileIO``; SLF4J)."""
    import pyspark

    runtime, _extensions, jackson = iceberg_jars()
    return [runtime, jackson, Path(pyspark.__file__).parent / "jars" / "*"]


def compiled_classes() -> Path:
    """The directory holding the compiled RestCatalogServer, built by ``javac`` unless cached."""
    runtime, jackson = _classpath_jars()[:2]
    key = hashlib.sha256(
        SOURCE.read_bytes() + repr([(p.name, p.stat().st_size) for p in (runtime, jackson)]).encode()
    ).hexdigest()[:16]
    output = cache_dir() / f"rest-catalog-server-{key}"
    if output.exists():
        return output
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("javac is not installed (a JDK 17 is needed for the REST catalog tests)")
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=output.parent, prefix=f"{output.name}.tmp"))
    try:
        classpath = ":".join(str(p) for p in _classpath_jars())
        done = subprocess.run(
            [javac, "-d", str(staging), "-cp", classpath, str(SOURCE)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise RuntimeError(f"javac failed on {SOURCE.name}: {done.stderr[-2000:]}")
        staging.replace(output)  # whole, or not at all (another process may have won the race)
    except OSError:
        if not output.exists():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return output


@dataclass
class RestCatalogServer:
    """A running server: ``uri`` for the clients, ``warehouse`` (a ``file://`` URI) where Java writes."""

    process: subprocess.Popen[str]
    uri: str
    warehouse: str
    log: Path

    def stop(self) -> None:
        """Close its standard input (the server exits on end of input) and wait for it."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            self.process.wait(timeout=30)


def start_rest_catalog(workdir: Path, warehouse: str) -> RestCatalogServer:
    """Start the server on a free loopback port (the JDK picks it) over the Hadoop catalog whose
    warehouse is the ``file://`` URI ``warehouse``; its log goes to ``workdir``."""
    java = java_executable()
    if java is None:
        raise RuntimeError("no Java runtime")
    classpath = ":".join(str(p) for p in [compiled_classes(), *_classpath_jars()])
    log = workdir / "rest-catalog-server.log"
    java_opts = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Duser.timezone=UTC"]
    with log.open("w") as stderr:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [java, *java_opts, "-cp", classpath, MAIN_CLASS, warehouse],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    port = _read_port(process, log)
    return RestCatalogServer(process, f"http://127.0.0.1:{port}", warehouse, log)


def _read_port(process: subprocess.Popen[str], log: Path) -> int:
    """The port of the server's "LISTENING <port>" line, read by a thread so that a JVM that hangs
    before printing it fails the fixture after START_TIMEOUT_S instead of blocking the test run."""
    assert process.stdout is not None
    stdout: IO[str] = process.stdout
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(START_TIMEOUT_S)
    if not lines or not lines[0].startswith("LISTENING "):
        process.kill()
        process.wait()
        raise RuntimeError(f"the REST catalog server did not start: {log.read_text()[-2000:]}")
    return int(lines[0].split()[1])


@pytest.fixture(scope="module")
def rest_catalog_server(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RestCatalogServer]:
    """One Java REST catalog server per test module (its start takes seconds) on the warehouse of
    Spark's Hadoop catalog ``spark_cat``: a table created through it is ``spark_cat.db.<name>`` to Spark,
    and Spark's tables (java_table.fresh) are the server's too. Spark's own REST client cannot serve here:
    the runtime jar of snowpark-connect-deps-iceberg leaves out the relocated Apache HttpClient 5."""
    if shutil.which("javac") is None:
        reason = "javac is not installed (a JDK 17 compiles the REST catalog server)"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {reason}")
        pytest.skip(reason)
    started = time.perf_counter()
    warehouse = spark.conf.get(f"spark.sql.catalog.{CATALOG}.warehouse")
    assert warehouse is not None
    server = start_rest_catalog(tmp_path_factory.mktemp("rest-catalog"), warehouse)
    TIMINGS["REST catalog server start (javac unless cached)"] = time.perf_counter() - started
    try:
        yield server
    finally:
        server.stop()

"""Java Iceberg interoperability tests: tables written by Spark 3.5 + Iceberg 1.10 on Java 17."""

from __future__ import annotations

import pytest

from tests.interop.fixtures import TIMINGS, java_table, spark, spark_rows_checksum
from tests.interop.rest_catalog import rest_catalog_server

__all__ = ["java_table", "rest_catalog_server", "spark", "spark_rows_checksum"]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TIMINGS:
        terminalreporter.section("Java Iceberg interop setup")
        for what, seconds in TIMINGS.items():
            terminalreporter.write_line(f"{seconds:7.1f}s  {what}")

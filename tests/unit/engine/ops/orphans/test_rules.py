"""The rules of Java's ``remove_orphan_files`` shared by the orphan scan and delete: the age default and
floor, the ``gc.enabled`` refusal on a real SQLite-catalog table, and ``prefix_mismatch_mode`` parsing."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.ops.orphans.rules import (
    DEFAULT_ORPHAN_AGE,
    GC_MESSAGE,
    MIN_ORPHAN_AGE,
    PrefixMismatchMode,
    check_gc_enabled,
)

SCHEMA = pa.schema([("id", pa.int64())])


def test_the_default_age_is_three_days_and_the_floor_24_hours() -> None:
    assert datetime.timedelta(days=3) == DEFAULT_ORPHAN_AGE
    assert datetime.timedelta(hours=24) == MIN_ORPHAN_AGE
    assert DEFAULT_ORPHAN_AGE >= MIN_ORPHAN_AGE  # the default never needs force


def test_the_gc_message_is_javas() -> None:
    assert GC_MESSAGE == (
        "Cannot delete orphan files: GC is disabled (deleting files may corrupt other tables)"
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("ERROR", PrefixMismatchMode.ERROR),
        ("ignore", PrefixMismatchMode.IGNORE),
        ("Delete", PrefixMismatchMode.DELETE),
        ("  delete\n", PrefixMismatchMode.DELETE),
        (PrefixMismatchMode.IGNORE, PrefixMismatchMode.IGNORE),
    ],
)
def test_prefix_mismatch_mode_parses_case_insensitively(value: object, expected: PrefixMismatchMode) -> None:
    parsed = PrefixMismatchMode.parse(value)  # type: ignore[arg-type]

    assert parsed is expected


def test_prefix_mismatch_modes_are_strings_of_their_names() -> None:
    assert [m.value for m in PrefixMismatchMode] == ["ERROR", "IGNORE", "DELETE"]
    assert PrefixMismatchMode.DELETE == "DELETE"


@pytest.mark.parametrize("value", ["remove", "", "ERRORS", "del ete"])
def test_an_unknown_prefix_mismatch_mode_is_a_configuration_error(value: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        PrefixMismatchMode.parse(value)

    assert str(raised.value) == f"invalid prefix_mismatch_mode {value!r}; use one of ERROR, IGNORE, DELETE"
    assert raised.value.__cause__ is None
    assert raised.value.__suppress_context__


@pytest.mark.parametrize("properties", [{}, {"gc.enabled": "true"}, {"gc.enabled": "TRUE"}])
def test_a_table_with_gc_enabled_passes(catalog: SqlCatalog, properties: dict[str, str]) -> None:
    table = catalog.create_table("ns.t", schema=SCHEMA, properties=properties)

    assert check_gc_enabled(table) is None


@pytest.mark.parametrize("value", ["false", "False", "no", "0"])
def test_a_table_with_gc_disabled_is_refused(catalog: SqlCatalog, value: str) -> None:
    table = catalog.create_table("ns.t", schema=SCHEMA, properties={"gc.enabled": value})

    with pytest.raises(ConfigurationError) as raised:
        check_gc_enabled(table)

    assert str(raised.value) == GC_MESSAGE


def test_gc_check_reads_the_properties_as_last_refreshed(catalog: SqlCatalog) -> None:
    table = catalog.create_table("ns.t", schema=SCHEMA)
    stale = catalog.load_table("ns.t")
    with table.transaction() as tx:
        tx.set_properties({"gc.enabled": "false"})

    check_gc_enabled(stale)  # not refreshed: still the old properties
    stale.refresh()
    with pytest.raises(ConfigurationError, match="GC is disabled"):
        check_gc_enabled(stale)

"""engine/commit/dvs.py: the up-front deletion-vector checks of a commit, each a one-line ConfigurationError.

DVs only on v3 and position delete files only below it (Java's "Must use DVs for position deletes in
V3"), every DV with its three v3 fields, one added DV per data file, and a row delta removes only
file-scoped position deletes of data files that get an added DV. The head checks (concurrent DVs, a
second live DV, sequence numbers) run against real tables in tests/integration/test_v3_row_delta.py.
"""

from __future__ import annotations

import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from airflow_provider_iceberg_exec.engine.commit.dvs import check_added_dvs_arguments, check_replaced_deletes
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError


def _dv(target: str, offset: int | None = 4, size: int | None = 40) -> DataFile:
    return DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.POSITION_DELETES,
        file_path="file:///t/data/d.puffin",
        file_format=FileFormat.PUFFIN,
        partition=Record(),
        record_count=1,
        file_size_in_bytes=100,
        referenced_data_file=target,
        content_offset=offset,
        content_size_in_bytes=size,
    )


def _position_file(referenced: str | None) -> DataFile:
    return DataFile.from_args(
        _table_format_version=3,
        content=DataFileContent.POSITION_DELETES,
        file_path="file:///t/data/p.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=1,
        file_size_in_bytes=100,
        referenced_data_file=referenced,
    )


def _refused(match: str) -> pytest.RaisesContext[ConfigurationError]:
    return pytest.raises(ConfigurationError, match=match)


def test_each_format_version_takes_its_own_position_deletes() -> None:
    check_added_dvs_arguments(3, [_dv("a"), _dv("b", offset=44)], "ns.t")
    check_added_dvs_arguments(2, [_position_file("a")], "ns.t")
    with _refused("take deletion vectors only"):
        check_added_dvs_arguments(3, [_position_file("a")], "ns.t")
    with _refused("take position delete files only"):
        check_added_dvs_arguments(2, [_dv("a")], "ns.t")


def test_a_dv_needs_its_blob_and_a_data_file_takes_one() -> None:
    with _refused("lacks referenced_data_file, content_offset or content_size_in_bytes") as err:
        check_added_dvs_arguments(3, [_dv("a", size=None)], "ns.t")
    assert "\n" not in str(err.value)
    with _refused("two deletion vectors for data file a"):
        check_added_dvs_arguments(3, [_dv("a"), _dv("a", offset=44)], "ns.t")


def test_a_row_delta_removes_only_deletes_an_added_dv_replaces() -> None:
    check_replaced_deletes([_dv("a", offset=100), _position_file("a")], [_dv("a")])
    with _refused("not a file-scoped position delete replaced"):
        check_replaced_deletes([_dv("b", offset=100)], [_dv("a")])
    with _refused("not a file-scoped position delete replaced"):
        check_replaced_deletes([_position_file(None)], [_dv("a")])  # partition scoped: other files' rows

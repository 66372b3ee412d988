"""engine/meta/format_versions.py: versions 1 to 3 are written, 4 is refused in one line, and so are the
v3 features the writers do not implement (geo types, default values, unknown transforms)."""

from __future__ import annotations

import pytest
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.transforms import UnknownTransform
from pyiceberg.types import GeometryType, LongType, NestedField

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.meta.format_versions import check_writable_format

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def _metadata(version: int, schema: Schema = SCHEMA, spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC):  # type: ignore[no-untyped-def]
    metadata = new_table_metadata(
        schema, spec, UNSORTED_SORT_ORDER, "file:///w/t", {"format-version": str(min(version, 3))}
    )
    return metadata.model_copy(update={"format_version": version})


@pytest.mark.parametrize("version", [1, 2, 3])
def test_versions_one_to_three_are_written(version: int) -> None:
    check_writable_format(_metadata(version), "ns.t")


def test_version_four_is_refused_in_one_line() -> None:
    with pytest.raises(
        ConfigurationError, match=r"^cannot commit to ns\.t: format version 4 is not supported"
    ) as err:
        check_writable_format(_metadata(4), "ns.t")
    assert "\n" not in str(err.value)


def test_a_geometry_column_is_refused_on_v3() -> None:
    schema = Schema(
        NestedField(1, "id", LongType(), required=False), NestedField(2, "g", GeometryType(), required=False)
    )
    with pytest.raises(ConfigurationError, match="column 'g' of type geometry"):
        check_writable_format(_metadata(3, schema), "ns.t")


def test_a_default_value_is_refused_on_v3() -> None:
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "n", LongType(), required=False, initial_default=5, write_default=5),
    )
    # new_table_metadata drops defaults when it assigns fresh ids: set the schema afterwards
    metadata = _metadata(3).model_copy(update={"schemas": [schema]})
    with pytest.raises(ConfigurationError, match="default value of column 'n'"):
        check_writable_format(metadata, "ns.t")
    check_writable_format(_metadata(2).model_copy(update={"schemas": [schema]}), "ns.t")  # v3 only


def test_an_unknown_transform_is_refused_on_v3() -> None:
    spec = PartitionSpec(
        PartitionField(source_id=1, field_id=1000, transform=UnknownTransform("zorder"), name="z")
    )
    metadata = _metadata(3).model_copy(update={"partition_specs": [spec]})
    with pytest.raises(ConfigurationError, match="partition field 'z'"):
        check_writable_format(metadata, "ns.t")

"""Which format versions, and which format-version 3 features, this product commits to.

Format versions 1 to 3 are written (v3 with row lineage, :mod:`.row_ids`). A higher version (Java 1.10
knows 4) is refused, and so are the v3 features the writers do not implement: a write would have to
honour them (spec "Default values", "Partition Transforms", "Semi-structured Types"), and getting them
wrong silently changes data. PyIceberg 0.12 itself already fails to load a ``variant`` column and a
multi-argument transform, so neither reaches this check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

if TYPE_CHECKING:
    from pyiceberg.table.metadata import TableMetadata

__all__ = ["MAX_FORMAT_VERSION", "check_writable_format"]

#: The highest format version this product commits to.
MAX_FORMAT_VERSION = 3


def check_writable_format(metadata: TableMetadata, name: str) -> None:
    """Refuse a table whose format version, or one of whose v3 features, this product cannot write.

    :raises ConfigurationError: one line naming the table and the reason; nothing was written.
    """
    version = metadata.format_version
    if version > MAX_FORMAT_VERSION:
        raise ConfigurationError(
            f"cannot commit to {name}: format version {version} is not supported (at most "
            f"{MAX_FORMAT_VERSION}); table left unchanged"
        )
    if version >= 3 and (reason := _unsupported_v3_feature(metadata)) is not None:
        raise ConfigurationError(
            f"cannot commit to {name}: {reason} is not supported yet; table left unchanged"
        )


def _unsupported_v3_feature(metadata: TableMetadata) -> str | None:
    from pyiceberg.schema import index_by_id
    from pyiceberg.transforms import UnknownTransform
    from pyiceberg.types import GeographyType, GeometryType

    for field in index_by_id(metadata.schema()).values():
        if isinstance(field.field_type, (GeometryType, GeographyType)):
            return f"column {field.name!r} of type {field.field_type}"
        if field.initial_default is not None or field.write_default is not None:
            return f"the default value of column {field.name!r}"
    for spec in metadata.partition_specs:
        for partition_field in spec.fields:
            if isinstance(partition_field.transform, UnknownTransform):
                return f"partition field {partition_field.name!r} with transform {partition_field.transform}"
    return None

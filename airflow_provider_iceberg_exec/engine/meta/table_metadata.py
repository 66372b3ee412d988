"""Format-version 3 table metadata JSON, which PyIceberg 0.12 refuses to write.

``TableMetadataV3.model_dump_json`` raises "Writing V3 is not yet supported". The model itself is complete
(``next-row-id``, snapshots' ``first-row-id`` and ``added-rows``), so this module serialises it through the
base model's ``model_dump_json``, bypassing the override for this one call, exactly as PyIceberg's
``ToOutputFile.table_metadata`` does for v1 and v2 (same options, same compression by file name). Nothing
in PyIceberg changes for other callers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyiceberg.serializers import Compressor
from pyiceberg.typedef import IcebergBaseModel
from pyiceberg.utils.config import Config

if TYPE_CHECKING:
    from pyiceberg.io import OutputFile
    from pyiceberg.table.metadata import TableMetadata

__all__ = ["table_metadata_json", "write_table_metadata"]


def table_metadata_json(metadata: TableMetadata) -> str:
    """The metadata JSON of any format version, as PyIceberg writes v1 and v2 (by alias, nulls dropped).

    :raises ValueError: for v3 metadata without ``next-row-id`` (Java requires it).
    """
    if metadata.format_version >= 3 and getattr(metadata, "next_row_id", None) is None:
        raise ValueError("format-version 3 table metadata needs next-row-id")
    # As ToOutputFile: None values are kept only in the legacy current-snapshot-id mode.
    exclude_none = not Config().get_bool("legacy-current-snapshot-id")
    return IcebergBaseModel.model_dump_json(metadata, exclude_none=exclude_none)


def write_table_metadata(
    metadata: TableMetadata, output_file: OutputFile, *, overwrite: bool = False
) -> None:
    """Write ``metadata`` to ``output_file``, gzip-compressed when its name ends in ``.gz.metadata.json``."""
    payload = table_metadata_json(metadata).encode("utf-8")
    payload = Compressor.get_compressor(output_file.location).bytes_compressor()(payload)
    with output_file.create(overwrite=overwrite) as stream:
        stream.write(payload)

"""Planning an equality -> position delete conversion: one task per partition of the affected data files.

The equality delete files to convert are the live ones whose partition may match ``where`` (Java's
``ConvertEqualityDeleteFiles.filter``, inclusively projected onto each delete's spec). Every live data
file one of them applies to is examined, whatever ``where`` says (a global delete reaches every
partition): an equality delete can only be removed once all its data files are converted. A task is the
data files of one (spec, partition) with the chosen deletes that apply to them; the commit gathers the
tasks and removes a delete only when every data file it applied to at the planning snapshot was
examined.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.config import parse_byte_size
from airflow_provider_iceberg_exec.engine.contracts import (
    CONVERT_PLAN,
    CONVERT_TASK,
    ConvertPlan,
    ConvertTask,
)
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.io.catalog import refresh_table, table_name
from airflow_provider_iceberg_exec.engine.io.position_delete_writer import DeleteGranularity
from airflow_provider_iceberg_exec.engine.meta.format_versions import check_writable_format
from airflow_provider_iceberg_exec.engine.meta.scan import (
    ScannedFile,
    check_branch,
    parse_where,
    scan_snapshot,
)
from airflow_provider_iceberg_exec.engine.meta.task_files import scanned_to_json

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata

__all__ = ["ConvertOptions", "plan_conversion"]

#: Java's TableProperties.DELETE_TARGET_FILE_SIZE_BYTES and its default.
_DELETE_TARGET_PROPERTY = "write.delete.target-file-size-bytes"
_DELETE_TARGET_DEFAULT = 64 * 1024 * 1024
_GRANULARITY_PROPERTY = "write.delete.granularity"


@dataclass(frozen=True)
class ConvertOptions:
    """The conversion's options, resolved against the table's properties.

    :param target_file_size_bytes: position delete files roll at this size
        (default ``write.delete.target-file-size-bytes``, 64 MiB).
    :param delete_granularity: ``file`` (one delete file per data file, Spark's effective default) or
        ``partition`` (default ``write.delete.granularity``, else ``file``).
    """

    target_file_size_bytes: int = _DELETE_TARGET_DEFAULT
    delete_granularity: DeleteGranularity = DeleteGranularity.FILE

    NAMES = ("target-file-size-bytes", "delete-granularity")

    @classmethod
    def from_options(
        cls, options: Mapping[str, Any] | None, properties: Mapping[str, str] | None = None
    ) -> ConvertOptions:
        """Resolve ``options`` (Spark-style names) over the table ``properties``.

        :raises ConfigurationError: for an unknown option or a bad value.

        >>> ConvertOptions.from_options({"delete-granularity": "partition"}).delete_granularity.value
        'partition'
        >>> ConvertOptions.from_options({"rewrite-all": "true"})
        Traceback (most recent call last):
        ...
        airflow_provider_iceberg_exec.engine.errors.ConfigurationError: unknown option(s) ['rewrite-all'] for convert-equality-deletes; valid options: target-file-size-bytes, delete-granularity
        """  # noqa: E501
        options = dict(options or {})
        properties = properties or {}
        if unknown := sorted(set(options) - set(cls.NAMES)):
            raise ConfigurationError(
                f"unknown option(s) {unknown} for convert-equality-deletes; "
                f"valid options: {', '.join(cls.NAMES)}"
            )
        target_text = options.get("target-file-size-bytes", properties.get(_DELETE_TARGET_PROPERTY))
        target = _DELETE_TARGET_DEFAULT if target_text is None else parse_byte_size(str(target_text))
        if target <= 0:
            raise ConfigurationError(f"target-file-size-bytes must be > 0, got {target_text!r}")
        granularity = str(options.get("delete-granularity", properties.get(_GRANULARITY_PROPERTY, "file")))
        try:
            chosen = DeleteGranularity(granularity.strip().lower())
        except ValueError:
            raise ConfigurationError(f"delete-granularity {granularity!r} is not file or partition") from None
        return cls(target_file_size_bytes=target, delete_granularity=chosen)

    def to_options(self) -> dict[str, str]:
        """The options as the documents carry them."""
        return {
            "target-file-size-bytes": str(self.target_file_size_bytes),
            "delete-granularity": self.delete_granularity.value,
        }


def plan_conversion(
    table: Table,
    *,
    where: str | None = None,
    options: Mapping[str, Any] | None = None,
    branch: str = "main",
) -> ConvertPlan:
    """Plan the conversion of ``table``'s equality deletes (those whose partition may match ``where``).

    :returns: ``iceberg-exec/convert-plan@1``; its ``tasks`` are the inputs of :func:`.task.convert_task`.
        No task when there is nothing to convert.
    :raises ConfigurationError: for a v1 table (or above v3), a bad filter, bad options or an unknown branch.
    """
    refresh_table(table)
    metadata = table.metadata
    name = table_name(table)
    if metadata.format_version < 2:
        raise ConfigurationError(f"{name} is a format-version 1 table: it has no delete files to convert")
    check_writable_format(metadata, name)  # v3 converts to deletion vectors (one per data file)
    resolved = ConvertOptions.from_options(options, metadata.properties)
    row_filter = parse_where(where, metadata.schema())
    check_branch(metadata, branch, name)
    snapshot = table.snapshot_by_name(branch)
    plan = ConvertPlan(
        schema=CONVERT_PLAN,
        table=name,
        branch=branch,
        base_snapshot_id=snapshot.snapshot_id if snapshot else None,
        options=resolved.to_options(),
        equality_delete_files_count=0,
        tasks=[],
    )
    if snapshot is None:
        return plan
    files = scan_snapshot(table.io, metadata, snapshot)
    chosen = _chosen_deletes(metadata, [d.data_file for d in files.delete_files], row_filter)
    plan["equality_delete_files_count"] = len(chosen)
    by_partition: dict[tuple[int, str], list[ScannedFile]] = defaultdict(list)
    for scanned in files.data_files:
        if any(d.data_file.file_path in chosen for d in scanned.delete_files):
            data_file = scanned.data_file
            by_partition[(data_file.spec_id, repr(_values(data_file)))].append(scanned)
    specs, schema = metadata.specs(), metadata.schema()
    for number, (_key, group) in enumerate(sorted(by_partition.items(), key=lambda kv: kv[0])):
        deletes = sorted(
            {d.data_file.file_path for f in group for d in f.delete_files if d.data_file.file_path in chosen}
        )
        plan["tasks"].append(
            ConvertTask(
                schema=CONVERT_TASK,
                table=name,
                branch=branch,
                base_snapshot_id=snapshot.snapshot_id,
                task_id=f"convert-{number:05d}",
                options=resolved.to_options(),
                equality_delete_files=deletes,
                data_files=[scanned_to_json(f, specs, schema) for f in group],
            )
        )
    # Deletes that apply to no live data file need no task; the first task carries them to the commit.
    dangling = sorted(set(chosen) - {p for t in plan["tasks"] for p in t["equality_delete_files"]})
    plan["dangling_equality_delete_files"] = dangling
    if plan["tasks"]:
        plan["tasks"][0]["dangling_equality_delete_files"] = dangling
    return plan


def _values(data_file: DataFile) -> tuple[Any, ...]:
    partition = data_file.partition
    return tuple(partition[i] for i in range(len(partition)))


def _chosen_deletes(
    metadata: TableMetadata, delete_files: list[DataFile], row_filter: BooleanExpression
) -> set[str]:
    """The paths of the live equality delete files whose partition may hold rows matching the filter."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.expressions.visitors import expression_evaluator, inclusive_projection
    from pyiceberg.manifest import DataFileContent
    from pyiceberg.schema import Schema

    equality = [f for f in delete_files if f.content == DataFileContent.EQUALITY_DELETES]
    if row_filter == AlwaysTrue():
        return {f.file_path for f in equality}
    schema, specs = metadata.schema(), metadata.specs()
    evaluators: dict[int, Any] = {}
    chosen = set()
    for delete_file in equality:
        spec = specs[delete_file.spec_id]
        if delete_file.spec_id not in evaluators:
            projected = inclusive_projection(schema, spec, case_sensitive=True)(row_filter)
            partition_schema = Schema(*spec.partition_type(schema).fields)
            evaluators[delete_file.spec_id] = expression_evaluator(partition_schema, projected, True)
        if evaluators[delete_file.spec_id](delete_file.partition):
            chosen.add(delete_file.file_path)
    return chosen

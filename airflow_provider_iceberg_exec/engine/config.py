"""Frozen configuration objects of the engine: resource limits and compaction options.

Everything here is plain data, validated on construction, so that a bad value fails before any file is
read or written.
"""

from __future__ import annotations

import enum
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

__all__ = [
    "MIN_MEMORY_LIMIT_BYTES",
    "CompactionOptions",
    "ResourceLimits",
    "RewriteJobOrder",
    "Strategy",
    "parse_byte_size",
]

MiB = 1024 * 1024
GiB = 1024 * MiB

#: Below this the writers' and readers' fixed buffers no longer fit beside a useful sort budget.
MIN_MEMORY_LIMIT_BYTES = 32 * MiB

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1024, "M": MiB, "G": GiB, "T": 1024 * GiB}


def parse_byte_size(text: str | int) -> int:
    """Parse a byte size such as ``256MiB``, ``1G`` or ``1048576``.

    :param text: a number of bytes, optionally with a binary unit (K, M, G, T; ``iB`` or ``B`` optional).
    :returns: the size in bytes.
    :raises ConfigurationError: when the text is not a size.

    >>> parse_byte_size("256MiB")
    268435456
    >>> parse_byte_size(1024)
    1024
    """
    if isinstance(text, int):
        return text
    match = _SIZE_RE.match(text)
    if not match:
        raise ConfigurationError(
            f"not a byte size: {text!r}; use a number with an optional unit, e.g. 256MiB"
        )
    number, unit = match.groups()
    return int(float(number) * _UNITS[(unit or "")[:1].upper()])


@dataclass(frozen=True)
class ResourceLimits:
    """What one bounded execution may use.

    :param memory_limit_bytes: the DataFusion memory pool and the budget the readers and writers are sized
        from; peak RSS stays within this plus a fixed overhead (interpreter and libraries).
    :param spill_dir: where spill files and staging files go; must be writable.
    :param target_partitions: DataFusion parallelism (default: the number of cores).
    :param batch_size: rows per record batch.
    """

    memory_limit_bytes: int = 256 * MiB
    spill_dir: str = field(default_factory=lambda: os.path.join(tempfile.gettempdir(), "iceberg-exec-spill"))
    target_partitions: int = field(default_factory=lambda: max(1, os.cpu_count() or 1))
    batch_size: int = 8192

    def __post_init__(self) -> None:
        if self.memory_limit_bytes < MIN_MEMORY_LIMIT_BYTES:
            raise ConfigurationError(
                f"memory limit {self.memory_limit_bytes} bytes is below the floor of "
                f"{MIN_MEMORY_LIMIT_BYTES // MiB}MiB; raise it"
            )
        if self.target_partitions < 1:
            raise ConfigurationError("target_partitions must be >= 1")
        if self.batch_size < 1:
            raise ConfigurationError("batch_size must be >= 1")

    @property
    def writer_buffer_bytes(self) -> int:
        """Bytes one Parquet writer may buffer for a row group (an eighth of the limit, at most 128 MiB)."""
        return min(128 * MiB, self.memory_limit_bytes // 8)


class Strategy(str, enum.Enum):
    """How a group's rows are ordered in its output (Spark's ``strategy``)."""

    BINPACK = "binpack"
    SORT = "sort"


class RewriteJobOrder(str, enum.Enum):
    """In which order groups run (Spark's ``rewrite-job-order``)."""

    NONE = "none"
    BYTES_ASC = "bytes-asc"
    BYTES_DESC = "bytes-desc"
    FILES_ASC = "files-asc"
    FILES_DESC = "files-desc"


_DEFAULT_TARGET_FILE_SIZE = 512 * MiB
_TARGET_FILE_SIZE_PROPERTY = "write.target-file-size-bytes"


@dataclass(frozen=True)
class CompactionOptions:
    """Spark's ``rewrite_data_files`` options, resolved against the table's properties.

    Build it with :meth:`from_options` from the user's ``key=value`` strings; the attribute names are the
    option names with ``-`` and ``.`` turned into ``_``.
    """

    target_file_size_bytes: int = _DEFAULT_TARGET_FILE_SIZE
    min_file_size_bytes: int = int(_DEFAULT_TARGET_FILE_SIZE * 0.75)
    max_file_size_bytes: int = int(_DEFAULT_TARGET_FILE_SIZE * 1.80)
    min_input_files: int = 5
    rewrite_all: bool = False
    max_file_group_size_bytes: int = 100 * GiB
    max_file_group_input_files: int = 2**63 - 1
    max_files_to_rewrite: int | None = None
    delete_file_threshold: int = 2**31 - 1
    delete_ratio_threshold: float = 0.3
    partial_progress_enabled: bool = False
    partial_progress_max_commits: int = 10
    partial_progress_max_failed_commits: int | None = None
    rewrite_job_order: RewriteJobOrder = RewriteJobOrder.NONE
    output_spec_id: int | None = None
    use_starting_sequence_number: bool = True
    remove_dangling_deletes: bool = False

    #: option name -> attribute name, in Spark's spelling
    NAMES = {
        "target-file-size-bytes": "target_file_size_bytes",
        "min-file-size-bytes": "min_file_size_bytes",
        "max-file-size-bytes": "max_file_size_bytes",
        "min-input-files": "min_input_files",
        "rewrite-all": "rewrite_all",
        "max-file-group-size-bytes": "max_file_group_size_bytes",
        "max-file-group-input-files": "max_file_group_input_files",
        "max-files-to-rewrite": "max_files_to_rewrite",
        "delete-file-threshold": "delete_file_threshold",
        "delete-ratio-threshold": "delete_ratio_threshold",
        "partial-progress.enabled": "partial_progress_enabled",
        "partial-progress.max-commits": "partial_progress_max_commits",
        "partial-progress.max-failed-commits": "partial_progress_max_failed_commits",
        "rewrite-job-order": "rewrite_job_order",
        "output-spec-id": "output_spec_id",
        "use-starting-sequence-number": "use_starting_sequence_number",
        "remove-dangling-deletes": "remove_dangling_deletes",
    }

    def __post_init__(self) -> None:
        if self.target_file_size_bytes <= 0:
            raise ConfigurationError("target-file-size-bytes must be > 0")
        if self.min_file_size_bytes < 0:
            raise ConfigurationError("min-file-size-bytes must be >= 0")
        if not self.min_file_size_bytes <= self.target_file_size_bytes <= self.max_file_size_bytes:
            raise ConfigurationError(
                "need min-file-size-bytes <= target-file-size-bytes <= max-file-size-bytes, got "
                f"{self.min_file_size_bytes}, {self.target_file_size_bytes}, {self.max_file_size_bytes}"
            )
        if self.min_input_files < 1:
            raise ConfigurationError("min-input-files must be >= 1")
        if self.max_file_group_size_bytes <= 0:
            raise ConfigurationError("max-file-group-size-bytes must be > 0")
        if self.max_file_group_input_files < 1:
            raise ConfigurationError("max-file-group-input-files must be >= 1")
        if self.max_files_to_rewrite is not None and self.max_files_to_rewrite < 0:
            raise ConfigurationError("max-files-to-rewrite must be >= 0")
        if self.delete_file_threshold < 0:
            raise ConfigurationError("delete-file-threshold must be >= 0")
        # Written so that NaN fails too (every comparison with NaN is false).
        if not 0 < self.delete_ratio_threshold <= 1:
            raise ConfigurationError(
                f"delete-ratio-threshold must be in (0, 1], got {self.delete_ratio_threshold}"
            )
        if self.partial_progress_max_commits < 1:
            raise ConfigurationError("partial-progress.max-commits must be >= 1")
        if (
            self.partial_progress_max_failed_commits is not None
            and self.partial_progress_max_failed_commits < 0
        ):
            raise ConfigurationError("partial-progress.max-failed-commits must be >= 0")

    @property
    def max_failed_commits(self) -> int:
        """``partial-progress.max-failed-commits``, defaulting to ``partial-progress.max-commits``."""
        if self.partial_progress_max_failed_commits is None:
            return self.partial_progress_max_commits
        return self.partial_progress_max_failed_commits

    @classmethod
    def from_options(
        cls, options: Mapping[str, str | int | bool] | None, table_properties: Mapping[str, str] | None = None
    ) -> CompactionOptions:
        """Resolve user options and table properties into options, with Spark's defaults.

        :param options: ``{"option-name": value}``; values may be strings as on Spark's command line.
        :param table_properties: the table's properties (``write.target-file-size-bytes``).
        :raises ConfigurationError: for an unknown option (the message lists the valid ones) or a bad value.

        >>> CompactionOptions.from_options({"target-file-size-bytes": "1000"}).min_file_size_bytes
        750
        >>> CompactionOptions.from_options({"target-file-size": "1"})
        Traceback (most recent call last):
        ...
        airflow_provider_iceberg_exec.engine.errors.ConfigurationError: Cannot use options ['target-file-size'], they are not supported; valid options: delete-file-threshold, delete-ratio-threshold, max-file-group-input-files, max-file-group-size-bytes, max-file-size-bytes, max-files-to-rewrite, min-file-size-bytes, min-input-files, output-spec-id, partial-progress.enabled, partial-progress.max-commits, partial-progress.max-failed-commits, remove-dangling-deletes, rewrite-all, rewrite-job-order, target-file-size-bytes, use-starting-sequence-number
        """  # noqa: E501
        options = dict(options or {})
        unknown = sorted(set(options) - set(cls.NAMES))
        if unknown:
            raise ConfigurationError(
                f"Cannot use options {unknown}, they are not supported; valid options: "
                + ", ".join(sorted(cls.NAMES))
            )
        properties = table_properties or {}
        values: dict[str, object] = {}
        types = {f.name: f.type for f in fields(cls)}
        for name, raw in options.items():
            attr = cls.NAMES[name]
            values[attr] = _convert(name, raw, str(types[attr]))
        if "target_file_size_bytes" not in values and _TARGET_FILE_SIZE_PROPERTY in properties:
            values["target_file_size_bytes"] = _convert(
                _TARGET_FILE_SIZE_PROPERTY, properties[_TARGET_FILE_SIZE_PROPERTY], "int"
            )
        target = int(values.get("target_file_size_bytes", _DEFAULT_TARGET_FILE_SIZE))  # type: ignore[call-overload]
        values.setdefault("min_file_size_bytes", int(target * 0.75))
        values.setdefault("max_file_size_bytes", int(target * 1.80))
        return cls(**values)  # type: ignore[arg-type]

    def to_options(self) -> dict[str, str]:
        """The options as Spark-named strings, the form carried in task specs.

        >>> CompactionOptions.from_options(CompactionOptions().to_options()) == CompactionOptions()
        True
        """
        out: dict[str, str] = {}
        for name, attr in self.NAMES.items():
            value = getattr(self, attr)
            if value is None:
                continue
            if isinstance(value, bool):
                out[name] = "true" if value else "false"
            elif isinstance(value, enum.Enum):
                out[name] = str(value.value)
            else:
                out[name] = str(value)
        return out


def _convert(name: str, raw: object, type_name: str) -> object:
    text = str(raw).strip()
    try:
        if "bool" in type_name:
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if "RewriteJobOrder" in type_name:
            return RewriteJobOrder(text.lower())
        if "float" in type_name:
            return float(text)
        return int(text)
    except ValueError:
        if "RewriteJobOrder" in type_name:
            valid = ", ".join(o.value for o in RewriteJobOrder)
            raise ConfigurationError(f"invalid {name}: {text!r}; use one of {valid}") from None
        kind = (
            "true or false" if "bool" in type_name else "a number" if "float" in type_name else "an integer"
        )
        raise ConfigurationError(f"invalid {name}: {text!r}; expected {kind}") from None

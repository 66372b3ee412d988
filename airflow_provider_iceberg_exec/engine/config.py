"""Frozen configuration objects of the engine: resource limits and compaction options.

Everything here is plain data, validated on construction, so that a bad value fails before any file is
read or written. :func:`parse_byte_size`, the engine's parser of sizes such as ``256MiB``, is the
provider's one size grammar (:mod:`airflow_provider_iceberg_exec.sizes`), so that the engine, the CLI and
the Airflow layer accept and refuse the same strings.
"""

from __future__ import annotations

import enum
import operator
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.sizes import parse_byte_size

__all__ = [
    "MIN_MEMORY_LIMIT_BYTES",
    "CompactionOptions",
    "PositionDeleteOptions",
    "ResourceLimits",
    "RewriteJobOrder",
    "Strategy",
    "parse_byte_size",
]

MiB = 1024 * 1024
GiB = 1024 * MiB

#: Below this the writers' and readers' fixed buffers no longer fit beside a useful sort budget.
MIN_MEMORY_LIMIT_BYTES = 32 * MiB


@dataclass(frozen=True)
class ResourceLimits:
    """What one bounded execution may use.

    :param memory_limit_bytes: the DataFusion memory pool and the budget the readers and writers are sized
        from; peak RSS stays within this plus a fixed overhead (interpreter and libraries).
    :param spill_dir: where spill files and staging files go; must be writable.
    :param target_partitions: the cores the execution is given (default: the machine's): DataFusion's
        parallelism, and with the memory limit the writers run at once (:attr:`file_workers`).
    :param batch_size: rows per record batch.
    :param writer_limit_bytes: the limit the Parquet writers' row groups are sized from, when it is not
        ``memory_limit_bytes``: a share of a limit (:meth:`shared`) keeps the whole's row groups.
    """

    memory_limit_bytes: int = 256 * MiB
    spill_dir: str = field(default_factory=lambda: os.path.join(tempfile.gettempdir(), "iceberg-exec-spill"))
    target_partitions: int = field(default_factory=lambda: max(1, os.cpu_count() or 1))
    batch_size: int = 8192
    writer_limit_bytes: int | None = None

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
        if self.writer_limit_bytes is not None and self.writer_limit_bytes < self.memory_limit_bytes:
            raise ConfigurationError("writer_limit_bytes must be at least memory_limit_bytes")

    @property
    def writer_buffer_bytes(self) -> int:
        """Bytes one Parquet writer may buffer for a row group (an eighth of the limit, at most 128 MiB)."""
        return min(128 * MiB, (self.writer_limit_bytes or self.memory_limit_bytes) // 8)

    @property
    def shares(self) -> int:
        """Into how many executions side by side these limits can be shared (:meth:`shared`): one per
        writer the limit holds at once (:attr:`file_workers`), each with at least the floor of a limit."""
        return max(1, min(self.file_workers, self.memory_limit_bytes // MIN_MEMORY_LIMIT_BYTES))

    def shared(self, count: int) -> ResourceLimits:
        """The limits of one of ``count`` executions running side by side within these (at most
        :attr:`shares`): a ``count``-th of the memory and of the cores each. The writers keep the row
        groups of the whole, so that a file does not depend on what ran beside it; the ``count`` writers
        fit in the limit as :attr:`file_workers` writers do.

        >>> whole = ResourceLimits(memory_limit_bytes=256 * MiB, target_partitions=2)
        >>> half = whole.shared(2)
        >>> half.memory_limit_bytes // MiB, half.target_partitions, half.writer_buffer_bytes // MiB
        (128, 1, 32)
        >>> whole.writer_buffer_bytes // MiB, half.file_workers
        (32, 1)
        """
        if not 1 <= count <= self.shares:
            raise ConfigurationError(f"these limits are shared by 1 to {self.shares} executions, not {count}")
        if count == 1:
            return self
        return replace(
            self,
            memory_limit_bytes=self.memory_limit_bytes // count,
            target_partitions=max(1, self.target_partitions // count),
            writer_limit_bytes=self.writer_limit_bytes or self.memory_limit_bytes,
        )

    @property
    def file_workers(self) -> int:
        """Writers run at once (copy-on-write's data files, a binpack group's lanes): one per core, as long
        as each gets four writer buffers of the limit. Derived, not configured: the engine sizes its
        readers and writers from the limit, so the limit and the cores are the only knobs."""
        return max(1, min(self.target_partitions, self.memory_limit_bytes // (4 * self.writer_buffer_bytes)))


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
    var_length_contribution: int = 8
    max_output_size: int = 2**31 - 1
    #: at most this many small plain groups (binpack, sort) rewrite at once in one process (Spark's default 5)
    max_concurrent_file_group_rewrites: int = 5

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
        # z-order (``sort_order="zorder(c1, c2)"``): bytes per string or binary column, bytes of the key
        "var-length-contribution": "var_length_contribution",
        "max-output-size": "max_output_size",
        "max-concurrent-file-group-rewrites": "max_concurrent_file_group_rewrites",
    }

    def __post_init__(self) -> None:
        """Refuse the options with the first of ``_COMPACTION_CHECKS`` that fails."""
        for check in _COMPACTION_CHECKS:
            problem = check(self)
            if problem is not None:
                raise ConfigurationError(problem)

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
        airflow_provider_iceberg_exec.engine.errors.ConfigurationError: Cannot use options ['target-file-size'], they are not supported; valid options: delete-file-threshold, delete-ratio-threshold, max-concurrent-file-group-rewrites, max-file-group-input-files, max-file-group-size-bytes, max-file-size-bytes, max-files-to-rewrite, max-output-size, min-file-size-bytes, min-input-files, output-spec-id, partial-progress.enabled, partial-progress.max-commits, partial-progress.max-failed-commits, remove-dangling-deletes, rewrite-all, rewrite-job-order, target-file-size-bytes, use-starting-sequence-number, var-length-contribution
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


#: one check of CompactionOptions: the problem in one line, or None
_Check = Callable[[CompactionOptions], str | None]


def _bound(attr: str, relation: str, bound: int, *, optional: bool = False) -> _Check:
    """A check that option ``attr`` is ``relation bound`` (``None`` passes when ``optional``)."""
    fails = operator.le if relation == ">" else operator.lt

    def check(options: CompactionOptions) -> str | None:
        value = getattr(options, attr)
        if (optional and value is None) or not fails(value, bound):
            return None
        return f"{_OPTION_NAMES[attr]} must be {relation} {bound}"

    return check


def _file_sizes_in_order(options: CompactionOptions) -> str | None:
    """``min-file-size-bytes <= target-file-size-bytes <= max-file-size-bytes``."""
    if options.min_file_size_bytes <= options.target_file_size_bytes <= options.max_file_size_bytes:
        return None
    return (
        "need min-file-size-bytes <= target-file-size-bytes <= max-file-size-bytes, got "
        f"{options.min_file_size_bytes}, {options.target_file_size_bytes}, {options.max_file_size_bytes}"
    )


def _delete_ratio_in_range(options: CompactionOptions) -> str | None:
    """``delete-ratio-threshold`` in (0, 1], written so that NaN fails too (every comparison is false)."""
    if 0 < options.delete_ratio_threshold <= 1:
        return None
    return f"delete-ratio-threshold must be in (0, 1], got {options.delete_ratio_threshold}"


_OPTION_NAMES = {attr: name for name, attr in CompactionOptions.NAMES.items()}

#: CompactionOptions' checks, in the order they run: the first that fails is the error raised.
_COMPACTION_CHECKS: tuple[_Check, ...] = (
    _bound("target_file_size_bytes", ">", 0),
    _bound("min_file_size_bytes", ">=", 0),
    _file_sizes_in_order,
    _bound("min_input_files", ">=", 1),
    _bound("max_file_group_size_bytes", ">", 0),
    _bound("max_file_group_input_files", ">=", 1),
    _bound("max_files_to_rewrite", ">=", 0, optional=True),
    _bound("delete_file_threshold", ">=", 0),
    _delete_ratio_in_range,
    _bound("partial_progress_max_commits", ">=", 1),
    _bound("var_length_contribution", ">", 0),
    _bound("max_output_size", ">", 0),
    _bound("max_concurrent_file_group_rewrites", ">=", 1),
    _bound("partial_progress_max_failed_commits", ">=", 0, optional=True),
)


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


_DELETE_TARGET_FILE_SIZE_PROPERTY = "write.delete.target-file-size-bytes"
_DEFAULT_DELETE_TARGET_FILE_SIZE = 64 * MiB
#: the planner options ``rewrite_position_delete_files`` shares with ``rewrite_data_files``
_POSITION_DELETE_PLANNER_NAMES = (
    "target-file-size-bytes",
    "min-file-size-bytes",
    "max-file-size-bytes",
    "min-input-files",
    "rewrite-all",
    "max-file-group-size-bytes",
    "partial-progress.enabled",
    "partial-progress.max-commits",
    "rewrite-job-order",
)
_MAX_CONCURRENT = "max-concurrent-file-group-rewrites"


@dataclass(frozen=True)
class PositionDeleteOptions:
    """Spark's ``rewrite_position_delete_files`` options, resolved against the table's properties.

    The size, group and partial-progress options are those of Java's ``BinPackRewritePositionDeletePlanner``
    (a ``SizeBasedFileRewritePlanner``), with the target taken from ``write.delete.target-file-size-bytes``
    (64 MiB); they are kept as the :class:`CompactionOptions` the shared planner reads. Unlike
    ``rewrite_data_files``, Spark's action tolerates any number of failed commits under partial progress.

    :param planner: the planner's options.
    :param max_concurrent_file_group_rewrites: accepted as Spark does; groups run one after another here.
    """

    planner: CompactionOptions = field(
        default_factory=lambda: CompactionOptions.from_options(
            {}, {_TARGET_FILE_SIZE_PROPERTY: str(_DEFAULT_DELETE_TARGET_FILE_SIZE)}
        )
    )
    max_concurrent_file_group_rewrites: int = 5

    #: every option name Spark's action accepts
    NAMES = (*_POSITION_DELETE_PLANNER_NAMES, _MAX_CONCURRENT)

    def __post_init__(self) -> None:
        if self.max_concurrent_file_group_rewrites < 1:
            raise ConfigurationError(f"{_MAX_CONCURRENT} must be >= 1")

    @classmethod
    def from_options(
        cls, options: Mapping[str, str | int | bool] | None, table_properties: Mapping[str, str] | None = None
    ) -> PositionDeleteOptions:
        """Resolve user options and table properties, with Spark's defaults.

        :raises ConfigurationError: for an unknown option (the message lists the valid ones) or a bad value.

        >>> PositionDeleteOptions.from_options({}).planner.target_file_size_bytes
        67108864
        >>> PositionDeleteOptions.from_options({"delete-file-threshold": "1"})
        Traceback (most recent call last):
        ...
        airflow_provider_iceberg_exec.engine.errors.ConfigurationError: Cannot use options ['delete-file-threshold'], they are not supported; valid options: max-concurrent-file-group-rewrites, max-file-group-size-bytes, max-file-size-bytes, min-file-size-bytes, min-input-files, partial-progress.enabled, partial-progress.max-commits, rewrite-all, rewrite-job-order, target-file-size-bytes
        """  # noqa: E501
        options = dict(options or {})
        unknown = sorted(set(options) - set(cls.NAMES))
        if unknown:
            raise ConfigurationError(
                f"Cannot use options {unknown}, they are not supported; valid options: "
                + ", ".join(sorted(cls.NAMES))
            )
        concurrent = options.pop(_MAX_CONCURRENT, 5)
        target = (table_properties or {}).get(
            _DELETE_TARGET_FILE_SIZE_PROPERTY, str(_DEFAULT_DELETE_TARGET_FILE_SIZE)
        )
        planner = CompactionOptions.from_options(options, {_TARGET_FILE_SIZE_PROPERTY: target})
        return cls(planner, int(str(_convert(_MAX_CONCURRENT, concurrent, "int"))))

    @property
    def partial_progress_enabled(self) -> bool:
        """``partial-progress.enabled``."""
        return self.planner.partial_progress_enabled

    @property
    def max_failed_commits(self) -> int:
        """Every commit batch may fail under partial progress, as in Spark's action."""
        return self.planner.partial_progress_max_commits

    def to_options(self) -> dict[str, str]:
        """The options as Spark-named strings, the form carried in task specs.

        >>> defaults = PositionDeleteOptions()
        >>> PositionDeleteOptions.from_options(defaults.to_options()) == defaults
        True
        """
        planner = self.planner.to_options()
        out = {name: planner[name] for name in _POSITION_DELETE_PLANNER_NAMES}
        out[_MAX_CONCURRENT] = str(self.max_concurrent_file_group_rewrites)
        return out

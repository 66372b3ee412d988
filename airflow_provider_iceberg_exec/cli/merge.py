"""The MERGE commands: ``merge`` (Spark's MERGE INTO clauses) and ``upsert`` (its shorthand)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import IO, Any

from airflow_provider_iceberg_exec.cli.common import add_limits, limits_of, table_of

_COUNTS = (
    "num_target_rows_updated",
    "num_target_rows_deleted",
    "num_target_rows_inserted",
    "num_target_rows_copied",
    "removed_data_files_count",
    "added_data_files_count",
    "added_delete_files_count",
    "removed_delete_files_count",
    "read_bytes",
    "written_bytes",
)


def _merge_summary(result: Mapping[str, Any]) -> str:
    lines = [f"mode: {result['mode']}"]
    lines.extend(f"{k}: {result[k]}" for k in _COUNTS)
    if result["snapshot_ids"]:
        lines.append(
            f"snapshot_ids: {result['snapshot_ids']} ({result['snapshot_operation']})"
            + (" (already committed)" if result["already_committed"] else "")
        )
    else:
        lines.append("snapshot_ids: [] (no row changed and none inserted: nothing committed)")
    lines.append(f"peak_rss_bytes: {result['peak_rss_bytes']}  spilled_bytes: {result['spilled_bytes']}")
    return "\n".join(lines)


def _columns(text: str) -> list[str]:
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    columns = [c.strip() for c in text.split(",")]
    if not all(columns):
        raise ConfigurationError(f"--on {text!r} is not COL[,COL...], e.g. --on id or --on region,id")
    return columns


def _source(args: argparse.Namespace) -> dict[str, Any]:
    """The source arguments: Parquet files, or a table at a snapshot (one of them)."""
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    files = list(args.source or [])
    source_table = getattr(args, "source_table", None)
    if bool(files) == bool(source_table):
        raise ConfigurationError("give the source as --source PATH... or --source-table NAME (one of them)")
    snapshot_id = getattr(args, "source_snapshot_id", None)
    if snapshot_id is not None and not source_table:
        raise ConfigurationError("--source-snapshot-id needs --source-table")
    return {"source_files": files, "source_table": source_table, "source_snapshot_id": snapshot_id}


def _write(result: Mapping[str, Any], args: argparse.Namespace, out: IO[str]) -> None:
    out.write((json.dumps(result, indent=2, sort_keys=True) if args.json else _merge_summary(result)) + "\n")


def _cmd_merge(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.ops.merge import merge

    result = merge(
        table_of(args),
        on=_columns(args.on),
        **_source(args),
        when_matched=args.when_matched,
        when_not_matched=args.when_not_matched,
        when_not_matched_by_source=args.when_not_matched_by_source,
        mode=args.mode,
        isolation_level=args.isolation_level,
        branch=args.branch,
        limits=limits_of(args),
        commit_id=args.commit_id,
    )
    _write(result, args, out)


def _cmd_upsert(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.ops.merge import upsert

    result = upsert(
        table_of(args),
        join_cols=_columns(args.on) if args.on else None,
        **_source(args),
        mode=args.mode,
        branch=args.branch,
        limits=limits_of(args),
        commit_id=args.commit_id,
    )
    _write(result, args, out)


def _common(command: argparse.ArgumentParser, on_help: str, *, on_required: bool) -> None:
    command.add_argument("table", help="NAMESPACE.TABLE (the target)")
    command.add_argument(
        "--source",
        nargs="+",
        default=[],
        metavar="PATH",
        help="Parquet files of the source rows (any location the table's FileIO reads)",
    )
    command.add_argument("--on", required=on_required, metavar="COL[,COL]", help=on_help)
    command.add_argument(
        "--mode",
        choices=("copy-on-write", "merge-on-read"),
        help="write mode (default: the table's write.merge.mode, else copy-on-write)",
    )
    command.add_argument("--branch", default="main")


def _merge_commands(commands: Any, limits: Any) -> None:
    merge = commands.add_parser(
        "merge",
        help="MERGE INTO the table from Parquet files or a table (Spark's WHEN [NOT] MATCHED clauses)",
    )
    _common(merge, "join columns t.COL = s.COL, e.g. id or region,id", on_required=True)
    merge.add_argument("--source-table", help="NAMESPACE.TABLE of the source rows, instead of --source")
    merge.add_argument("--source-snapshot-id", type=int, help="the source table's snapshot (default current)")
    for flag, example in (
        ("--when-matched", "\"AND s.op = 'D' THEN DELETE\" or 'UPDATE SET *'"),
        ("--when-not-matched", "'INSERT *' or 'INSERT (id, v) VALUES (s.id, s.v)'"),
        ("--when-not-matched-by-source", "'DELETE' or \"THEN UPDATE SET v = 'gone'\""),
    ):
        merge.add_argument(
            flag,
            action="append",
            default=[],
            metavar="TEXT",
            help=f"a clause after WHEN ... (t = target row, s = source row), e.g. {example}; repeatable, "
            "the first true one wins",
        )
    merge.add_argument(
        "--isolation-level",
        help="serializable or snapshot (default: the table's write.merge.isolation-level, else serializable)",
    )
    limits(merge)
    merge.add_argument("--commit-id", help="idempotency key of the commit (default: random)")
    merge.add_argument("--json", action="store_true", help="print the result document")
    merge.set_defaults(run=_cmd_merge)

    upsert = commands.add_parser(
        "upsert", help="update the matched rows from Parquet files and insert the others (MERGE shorthand)"
    )
    _common(
        upsert,
        "join columns, e.g. id or region,id (default: the table's identifier fields)",
        on_required=False,
    )
    limits(upsert)
    upsert.add_argument("--commit-id", help="idempotency key of the commit (default: random)")
    upsert.add_argument("--json", action="store_true", help="print the result document")
    upsert.set_defaults(run=_cmd_upsert)


def add_commands(commands: Any) -> None:
    """Add the merge commands to the ``iceberg-exec`` subparsers."""
    _merge_commands(commands, add_limits)

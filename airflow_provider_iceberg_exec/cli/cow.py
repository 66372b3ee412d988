"""The copy-on-write commands: ``delete``, ``update`` and ``overwrite`` by predicate."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import IO, Any

from airflow_provider_iceberg_exec.cli.common import (
    add_limits,
    limits_of,
    table_of,
)


def _cow_summary(result: Mapping[str, Any]) -> str:
    keys = (
        "deleted_data_files_count",
        "added_data_files_count",
        "untouched_data_files_count",
        "dropped_without_reading_count",
        "deleted_rows",
        "updated_rows",
        "inserted_rows",
        "rewritten_rows",
        "read_bytes",
        "written_bytes",
    )
    lines = [f"{k}: {result[k]}" for k in keys]
    if result["snapshot_ids"]:
        lines.append(
            f"snapshot_ids: {result['snapshot_ids']} ({result['snapshot_operation']}, "
            f"{result['isolation_level']} isolation)"
            + (" (already committed)" if result["already_committed"] else "")
        )
    else:
        lines.append("snapshot_ids: [] (no row matched: nothing committed)")
    lines.append(f"peak_rss_bytes: {result['peak_rss_bytes']}  spilled_bytes: {result['spilled_bytes']}")
    return "\n".join(lines)


def _cmd_cow(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
    from airflow_provider_iceberg_exec.engine.ops.cow import cow_rewrite

    assignments: dict[str, str] = {}
    for pair in getattr(args, "set", None) or []:
        column, sep, expression = pair.partition("=")
        if not sep or not column.strip() or not expression.strip():
            raise ConfigurationError(f"--set {pair!r} is not COLUMN=SQL_EXPRESSION, e.g. amount=amount * 1.1")
        if column.strip() in assignments:
            raise ConfigurationError(f"--set names column {column.strip()!r} twice")
        assignments[column.strip()] = expression.strip()
    result = cow_rewrite(
        table_of(args),
        operation=args.command,
        where=args.where,
        set_columns=assignments or None,
        source_files=getattr(args, "source", None) or (),
        branch=args.branch,
        isolation_level=args.isolation_level,
        limits=limits_of(args),
        commit_id=args.commit_id,
    )
    out.write((json.dumps(result, indent=2, sort_keys=True) if args.json else _cow_summary(result)) + "\n")


def _cow_commands(commands: Any, limits: Any) -> None:
    """``delete``, ``update`` and ``overwrite``: copy-on-write rewrites by predicate."""
    helps = {
        "delete": "delete the rows matching --where (copy-on-write)",
        "update": "set columns of the rows matching --where to SQL expressions (copy-on-write)",
        "overwrite": "replace the rows matching --where with the rows of Parquet files (copy-on-write)",
    }
    for name, text in helps.items():
        command = commands.add_parser(name, help=text)
        command.add_argument("table", help="NAMESPACE.TABLE")
        command.add_argument(
            "--where",
            help="PyIceberg row filter of the rows, e.g. \"user_id = 42\" (required; 'true' for all)",
        )
        if name == "update":
            command.add_argument(
                "--set",
                action="append",
                default=[],
                metavar="COL=SQL_EXPR",
                help="e.g. amount=amount * 1.1 (a DataFusion SQL expression); repeatable",
            )
        if name == "overwrite":
            command.add_argument(
                "--from",
                dest="source",
                nargs="+",
                default=[],
                metavar="PATH",
                help="Parquet files (any location the table's FileIO reads) whose rows all match --where",
            )
        command.add_argument("--branch", default="main")
        command.add_argument(
            "--isolation-level",
            help="serializable or snapshot (default: the table's write.delete/update.isolation-level)",
        )
        limits(command)
        command.add_argument("--commit-id", help="idempotency key of the commit (default: random)")
        command.add_argument("--json", action="store_true", help="print the result document")
        command.set_defaults(run=_cmd_cow)


def add_commands(commands: Any) -> None:
    """Add the cow commands to the ``iceberg-exec`` subparsers."""
    _cow_commands(commands, add_limits)

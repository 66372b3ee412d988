"""The delete-file commands: ``convert-equality-deletes`` and ``rewrite-position-deletes``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import IO, Any

from airflow_provider_iceberg_exec.cli.common import (
    add_limits,
    limits_of,
    options_of,
    table_of,
)


def _convert_summary(result: Mapping[str, Any]) -> str:
    keys = (
        "converted_equality_delete_files_count",
        "added_position_delete_files_count",
        "removed_position_delete_files_count",
        "matched_rows_count",
        "added_bytes_count",
    )
    lines = [f"{k}: {result[k]}" for k in keys]
    if result["kept_equality_delete_files"]:
        lines.append(f"kept_equality_delete_files: {len(result['kept_equality_delete_files'])}")
    lines.append(
        f"snapshot_ids: {result['snapshot_ids']}"
        + (" (already committed)" if result["already_committed"] else "")
    )
    lines.append(f"peak_rss_bytes: {result['peak_rss_bytes']}  spilled_bytes: {result['spilled_bytes']}")
    return "\n".join(lines)


def _cmd_convert_equality_deletes(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.ops.convert import convert_equality_deletes

    result = convert_equality_deletes(
        table_of(args),
        where=args.where,
        options=options_of(args.option),
        branch=args.branch,
        limits=limits_of(args),
        commit_id=args.commit_id,
    )
    out.write(
        (json.dumps(result, indent=2, sort_keys=True) if args.json else _convert_summary(result)) + "\n"
    )


def _delete_file_commands(commands: Any, limits: Any) -> None:
    convert = commands.add_parser(
        "convert-equality-deletes",
        help="turn equality deletes into position deletes, rewriting no data file (replace commit)",
    )
    convert.add_argument("table", help="NAMESPACE.TABLE")
    convert.add_argument("--where", help="PyIceberg filter: equality deletes of matching partitions")
    convert.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="target-file-size-bytes or delete-granularity (file or partition), repeatable",
    )
    convert.add_argument("--branch", default="main")
    limits(convert)
    convert.add_argument("--commit-id", help="idempotency key of the commit (default: random)")
    convert.add_argument("--json", action="store_true", help="print the result document")
    convert.set_defaults(run=_cmd_convert_equality_deletes)


_POSITION_DELETE_KEYS = (
    "rewritten_delete_files_count",
    "added_delete_files_count",
    "rewritten_bytes_count",
    "added_bytes_count",
    "failed_delete_files_count",
    "dangling_records",
)


def _cmd_rewrite_position_deletes(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.ops.position_deletes import rewrite_position_deletes

    result = rewrite_position_deletes(
        table_of(args),
        where=args.where,
        options=options_of(args.option),
        branch=args.branch,
        limits=limits_of(args),
        commit_id=args.commit_id,
    )
    if args.json:
        out.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
        return
    counts: Mapping[str, Any] = result
    lines = [f"{k}: {counts[k]}" for k in _POSITION_DELETE_KEYS]
    if not result["snapshot_ids"]:
        lines.append("nothing to do: no position delete files to rewrite by the options")
    else:
        lines.append(
            f"snapshot_ids: {result['snapshot_ids']}"
            + (" (already committed)" if result["already_committed"] else "")
        )
    out.write("\n".join(lines) + "\n")


def _position_delete_commands(commands: Any, limits: Any) -> None:
    rewrite = commands.add_parser(
        "rewrite-position-deletes",
        help="compact the position delete files of each partition (rewrite_position_delete_files)",
    )
    rewrite.add_argument("table", help="NAMESPACE.TABLE")
    rewrite.add_argument("--where", help="PyIceberg filter selecting the partitions to consider")
    rewrite.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="Spark option, repeatable"
    )
    rewrite.add_argument("--branch", default="main")
    limits(rewrite)
    rewrite.add_argument("--commit-id", help="idempotency key of the commit (default: random)")
    rewrite.add_argument("--json", action="store_true", help="print the result document")
    rewrite.set_defaults(run=_cmd_rewrite_position_deletes)


def add_commands(commands: Any) -> None:
    """Add the deletes commands to the ``iceberg-exec`` subparsers."""
    _position_delete_commands(commands, add_limits)
    _delete_file_commands(commands, add_limits)

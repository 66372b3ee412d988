"""Maintenance commands: ``orphan-scan``, ``orphan-delete``, ``expire-snapshots``, ``rewrite-manifests``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import IO, Any

from airflow_provider_iceberg_exec.cli.common import (
    add_limits,
    catalog_named,
    limits_of,
    pairs_of,
    table_of,
)


def _orphan_summary(result: Mapping[str, Any]) -> str:
    lines = [
        f"{k}: {result[k]}"
        for k in ("orphan_file_count", "orphan_bytes_count", "listed_file_count", "older_than")
    ]
    lines.append(f"orphan_list_uri: {result['orphan_list_uri']}")
    lines.append(f"result_uri: {result['result_uri']}")
    lines.extend(f"  {path}" for path in result["orphan_sample"][:5])
    if "delete" in result:
        lines.append(_orphan_delete_summary(result["delete"]))
    return "\n".join(lines)


def _orphan_delete_summary(result: Mapping[str, Any]) -> str:
    keys = (
        "deleted_file_count",
        "deleted_bytes_count",
        "skipped_referenced_count",
        "skipped_younger_count",
        "missing_file_count",
        "failed_file_count",
    )
    return "\n".join(f"{k}: {result[k]}" for k in keys) + ("\n(dry run)" if result["dry_run"] else "")


def _cmd_orphan_scan(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.ops.orphans import remove_orphan_files

    result = remove_orphan_files(
        table_of(args),
        dry_run=not args.delete,
        older_than=args.older_than,
        location=args.location,
        equal_schemes=pairs_of(args.equal_schemes, "--equal-schemes"),
        equal_authorities=pairs_of(args.equal_authorities, "--equal-authorities"),
        prefix_mismatch_mode=args.prefix_mismatch_mode,
        orphan_list_uri=args.orphan_list,
        force=args.force,
        limits=limits_of(args),
    )
    out.write((json.dumps(result, indent=2, sort_keys=True) if args.json else _orphan_summary(result)) + "\n")


def _cmd_orphan_delete(args: argparse.Namespace, out: IO[str]) -> None:
    from pyiceberg.io import load_file_io

    from airflow_provider_iceberg_exec.engine.io.catalog import load_table
    from airflow_provider_iceberg_exec.engine.ops.orphans import delete_orphan_files, read_orphan_scan_result

    catalog = catalog_named(args.catalog)
    doc = read_orphan_scan_result(load_file_io(dict(catalog.properties), args.result), args.result)
    table = load_table(catalog, args.table or str(doc.get("table")))
    result = delete_orphan_files(
        table,
        doc,
        dry_run=args.dry_run,
        batch_size=args.batch_size,
        max_concurrent_deletes=args.max_concurrent_deletes,
        force=args.force,
    )
    out.write(
        (json.dumps(result, indent=2, sort_keys=True) if args.json else _orphan_delete_summary(result)) + "\n"
    )


def _cmd_expire_snapshots(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.ops.expire import expire_snapshots

    result = expire_snapshots(
        table_of(args),
        older_than=args.older_than,
        retain_last=args.retain_last,
        snapshot_ids=args.snapshot_id,
        cleanup=not args.no_cleanup,
        dry_run=args.dry_run,
        max_concurrent_deletes=args.max_concurrent_deletes,
        limits=limits_of(args),
    )
    if args.json:
        out.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
        return
    lines = [f"expired_snapshot_count: {result['expired_snapshot_count']}"]
    lines.append(f"removed_refs: {result['removed_refs']}")
    lines.extend(f"{k}: {v}" for k, v in sorted(result.items()) if k.startswith("deleted_"))
    lines.append(f"failed_delete_count: {result['failed_delete_count']}")
    if result["dry_run"]:
        lines.append("(dry run)")
    out.write("\n".join(lines) + "\n")


def _maintenance_commands(commands: Any, limits: Any) -> None:
    """``orphan-scan``, ``orphan-delete`` and ``expire-snapshots``."""
    scan = commands.add_parser(
        "orphan-scan", help="list the files no metadata references (remove_orphan_files, dry run)"
    )
    scan.add_argument("table", help="NAMESPACE.TABLE")
    scan.add_argument(
        "--older-than", help="only files older than this: a duration (3d, 72h) or a timestamp (default: 3d)"
    )
    scan.add_argument("--location", help="list this location instead of the table's")
    scan.add_argument(
        "--prefix-mismatch-mode", default="ERROR", help="ERROR (default), IGNORE or DELETE, as in Spark"
    )
    scan.add_argument(
        "--equal-schemes",
        action="append",
        default=[],
        metavar="NAMES=NAME",
        help="e.g. s3a,s3n=s3; repeatable",
    )
    scan.add_argument(
        "--equal-authorities", action="append", default=[], metavar="NAMES=NAME", help="repeatable"
    )
    scan.add_argument(
        "--orphan-list", help="where to write the orphan list (default: the table's staging dir)"
    )
    scan.add_argument("--force", action="store_true", help="allow --older-than less than 24 hours ago")
    mode = scan.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="scan only, delete nothing (the default)")
    mode.add_argument("--delete", action="store_true", help="also delete the orphans (Spark's dry_run=false)")
    scan.add_argument("--json", action="store_true", help="print the result document")
    limits(scan)
    scan.set_defaults(run=_cmd_orphan_scan)

    delete = commands.add_parser("orphan-delete", help="delete the files of an orphan-scan result")
    delete.add_argument("result", help="the scan's result JSON or its orphan list")
    delete.add_argument("--table", help="NAMESPACE.TABLE (default: the one in the result)")
    delete.add_argument("--dry-run", action="store_true", help="check and count, delete nothing")
    delete.add_argument(
        "--force",
        action="store_true",
        help="accept the scan's older_than even when less than 24 hours ago (else younger files are kept)",
    )
    delete.add_argument(
        "--batch-size", type=int, default=100_000, help="paths per batch (default: %(default)s)"
    )
    delete.add_argument("--max-concurrent-deletes", type=int, default=8, help="default: %(default)s")
    delete.add_argument("--json", action="store_true", help="print the result document")
    delete.set_defaults(run=_cmd_orphan_delete)

    expire = commands.add_parser(
        "expire-snapshots", help="expire snapshots and delete the files they alone reached"
    )
    expire.add_argument("table", help="NAMESPACE.TABLE")
    expire.add_argument(
        "--older-than",
        help="a duration (5d) or a timestamp (default: history.expire.max-snapshot-age-ms, 5d)",
    )
    expire.add_argument(
        "--retain-last", type=int, help="ancestors to keep (default: history.expire.min-snapshots-to-keep, 1)"
    )
    expire.add_argument(
        "--snapshot-id", type=int, action="append", default=[], help="expire this id; repeatable"
    )
    expire.add_argument("--no-cleanup", action="store_true", help="change the metadata only; delete no file")
    expire.add_argument(
        "--dry-run", action="store_true", help="commit and delete nothing; report what would go"
    )
    expire.add_argument("--max-concurrent-deletes", type=int, default=8, help="default: %(default)s")
    expire.add_argument("--json", action="store_true", help="print the result document")
    limits(expire)
    expire.set_defaults(run=_cmd_expire_snapshots)


def _cmd_rewrite_manifests(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.config import parse_byte_size
    from airflow_provider_iceberg_exec.engine.ops.manifests import rewrite_manifests

    sort_by = [name.strip() for text in args.sort_by for name in text.split(",") if name.strip()]
    result = rewrite_manifests(
        table_of(args),
        spec_id=args.spec_id,
        sort_by=sort_by or None,
        target_size_bytes=parse_byte_size(args.target_size) if args.target_size else None,
        commit_id=args.commit_id,
        branch=args.branch,
    )
    if args.json:
        out.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
        return
    keys = (
        "rewritten_manifests_count",
        "added_manifests_count",
        "kept_manifests_count",
        "rewritten_entries_count",
    )
    counts: Mapping[str, Any] = result
    lines = [f"{k}: {counts[k]}" for k in keys]
    if result["snapshot_ids"]:
        lines.append(
            f"snapshot_ids: {result['snapshot_ids']}"
            + (" (already committed)" if result["already_committed"] else "")
        )
    else:
        lines.append(f"snapshot_ids: [] (nothing to rewrite in spec {result['spec_id']})")
    out.write("\n".join(lines) + "\n")


def _manifest_commands(commands: Any) -> None:
    """``rewrite-manifests``: Spark's ``rewrite_manifests``."""
    rewrite = commands.add_parser(
        "rewrite-manifests",
        help="rewrite the manifests of a spec into fewer, partition-clustered ones (replace, no data change)",
    )
    rewrite.add_argument("table", help="NAMESPACE.TABLE")
    rewrite.add_argument("--spec-id", type=int, help="the partition spec to rewrite (default: the current)")
    rewrite.add_argument(
        "--sort-by",
        action="append",
        default=[],
        metavar="FIELD[,FIELD]",
        help="partition fields to cluster by, in order (default: all of the spec's); repeatable",
    )
    rewrite.add_argument(
        "--target-size",
        help="manifest size aimed at, e.g. 8MiB (default: commit.manifest.target-size-bytes, 8MiB)",
    )
    rewrite.add_argument("--branch", default="main")
    rewrite.add_argument("--commit-id", help="idempotency key of the commit (default: random)")
    rewrite.add_argument("--json", action="store_true", help="print the result document")
    rewrite.set_defaults(run=_cmd_rewrite_manifests)


def add_commands(commands: Any) -> None:
    """Add the maintenance commands to the ``iceberg-exec`` subparsers."""
    _maintenance_commands(commands, add_limits)
    _manifest_commands(commands)

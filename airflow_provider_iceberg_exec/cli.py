"""``iceberg-exec``: every operation outside Airflow, with the same JSON documents the tasks exchange.

Catalogs are configured the PyIceberg way: ``--catalog NAME`` is read from ``~/.pyiceberg.yaml`` or from
``PYICEBERG_CATALOG__NAME__*`` environment variables. Exit codes: 0 success, 2 bad input (nothing was
changed), 1 any other failure.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any

from airflow_provider_iceberg_exec import __version__

__all__ = ["main"]


def _catalog(name: str) -> Any:
    from pyiceberg.utils.config import Config

    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
    from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig, load_catalog

    properties = Config().get_catalog_config(name)
    if not properties:
        raise ConfigurationError(
            f"catalog {name!r} is not configured; add it to ~/.pyiceberg.yaml or set "
            f"PYICEBERG_CATALOG__{name.upper()}__URI (and __TYPE, __WAREHOUSE)"
        )
    return load_catalog(CatalogConfig(name, {k: str(v) for k, v in properties.items()}))


def _table(args: argparse.Namespace) -> Any:
    from airflow_provider_iceberg_exec.engine.io.catalog import load_table

    return load_table(_catalog(args.catalog), args.table)


def _limits(args: argparse.Namespace) -> Any:
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits, parse_byte_size

    kwargs: dict[str, Any] = {"memory_limit_bytes": parse_byte_size(args.memory_limit)}
    if args.spill_dir:
        kwargs["spill_dir"] = args.spill_dir
    return ResourceLimits(**kwargs)


def _options(pairs: Sequence[str]) -> dict[str, str]:
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigurationError(f"option {pair!r} is not key=value, e.g. --option min-input-files=2")
        options[key.strip()] = value.strip()
    return options


def _read_json(path: str) -> Any:
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    try:
        with open(path) as f:
            return json.load(f)
    except OSError as err:
        raise ConfigurationError(f"cannot read {path}: {err.strerror}") from err
    except json.JSONDecodeError as err:
        raise ConfigurationError(f"{path} is not JSON: {err}") from err


def _emit(doc: Any, args: argparse.Namespace, out: IO[str]) -> None:
    text = json.dumps(doc, indent=2, sort_keys=True)
    if getattr(args, "output", None):
        with open(args.output, "w") as f:
            f.write(text + "\n")
    else:
        out.write(text + "\n")


def _plan_args(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "where": args.where,
        "options": _options(args.option),
        "strategy": args.strategy,
        "sort_order": args.sort_order,
        "branch": args.branch,
    }


def _summary(result: Mapping[str, Any]) -> str:
    keys = (
        "rewritten_data_files_count",
        "added_data_files_count",
        "rewritten_bytes_count",
        "failed_data_files_count",
        "removed_delete_files_count",
    )
    lines = [f"{k}: {result[k]}" for k in keys]
    lines.append(
        f"snapshot_ids: {result['snapshot_ids']}"
        + (" (already committed)" if result["already_committed"] else "")
    )
    lines.append(f"peak_rss_bytes: {result['peak_rss_bytes']}  spilled_bytes: {result['spilled_bytes']}")
    return "\n".join(lines)


def _cmd_compact(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.ops.compaction import compact

    result = compact(_table(args), limits=_limits(args), commit_id=args.commit_id, **_plan_args(args))
    out.write((json.dumps(result, indent=2, sort_keys=True) if args.json else _summary(result)) + "\n")


def _cmd_resolve_deletes(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.ops.resolve import resolve_equality_deletes

    result = resolve_equality_deletes(
        _table(args),
        where=args.where,
        limits=_limits(args),
        commit_id=args.commit_id,
        branch=args.branch,
        options=_options(args.option),
    )
    out.write((json.dumps(result, indent=2, sort_keys=True) if args.json else _summary(result)) + "\n")


def _cmd_plan(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.ops.compaction import plan_compaction

    _emit(plan_compaction(_table(args), **_plan_args(args)), args, out)


def _cmd_execute(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.contracts import COMPACTION_PLAN
    from airflow_provider_iceberg_exec.engine.documents import check_compaction_plan, check_rewrite_task
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
    from airflow_provider_iceberg_exec.engine.ops.compaction import execute_rewrite_task

    doc = _read_json(args.task)
    is_plan = isinstance(doc, dict) and doc.get("schema") == COMPACTION_PLAN
    tasks = list(check_compaction_plan(doc)["tasks"]) if is_plan else [check_rewrite_task(doc)]
    if args.group:
        tasks = [t for t in tasks if t.get("group_id") == args.group]
        if not tasks:
            raise ConfigurationError(f"no task with group id {args.group!r} in {args.task}")
    if not tasks:
        _emit([], args, out)
        return
    from airflow_provider_iceberg_exec.engine.io.catalog import load_table

    table = load_table(_catalog(args.catalog), str(tasks[0]["table"]))
    limits = _limits(args)
    results = [execute_rewrite_task(table, task, limits) for task in tasks]
    _emit(results if is_plan else results[0], args, out)


def _cmd_commit(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.contracts import REWRITE_RESULT
    from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError
    from airflow_provider_iceberg_exec.engine.io.catalog import load_table
    from airflow_provider_iceberg_exec.engine.ops.results import commit_results, results_table

    results: list[Any] = []
    for path in args.results:
        doc = _read_json(path)
        results.extend(doc if isinstance(doc, list) else [doc])
    planned = None
    if args.plan:
        plan = _read_json(args.plan)
        planned = plan.get("tasks") if isinstance(plan, dict) else plan
    if not all(isinstance(r, dict) for r in [*results, *(planned or [])]):
        raise DataFileCodecError("result and plan files must hold JSON documents or lists of them")
    name = results_table(args.table, results, planned or [])
    if name is None:
        out.write("nothing to commit\n")
        return
    table = load_table(_catalog(args.catalog), name)
    result = commit_results(table, results, commit_id=args.commit_id, planned=planned)
    compaction = all(r.get("schema") == REWRITE_RESULT for r in results)
    out.write(
        (_summary(result) if compaction and not args.json else json.dumps(result, indent=2, sort_keys=True))
        + "\n"
    )


def _cmd_demo(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.demo import run_demo

    run_demo(args.workdir, memory_limit=args.memory_limit, out=out, through_airflow=not args.engine_only)


def _pairs(pairs: Sequence[str], what: str) -> dict[str, str]:
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    mapping = {}
    for pair in pairs:
        keys, sep, value = pair.partition("=")
        if not sep or not keys.strip():
            raise ConfigurationError(f"{what} {pair!r} is not NAMES=NAME, e.g. s3a,s3n=s3")
        mapping[keys.strip()] = value.strip()
    return mapping


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
        _table(args),
        dry_run=not args.delete,
        older_than=args.older_than,
        location=args.location,
        equal_schemes=_pairs(args.equal_schemes, "--equal-schemes"),
        equal_authorities=_pairs(args.equal_authorities, "--equal-authorities"),
        prefix_mismatch_mode=args.prefix_mismatch_mode,
        orphan_list_uri=args.orphan_list,
        force=args.force,
        limits=_limits(args),
    )
    out.write((json.dumps(result, indent=2, sort_keys=True) if args.json else _orphan_summary(result)) + "\n")


def _cmd_orphan_delete(args: argparse.Namespace, out: IO[str]) -> None:
    from pyiceberg.io import load_file_io

    from airflow_provider_iceberg_exec.engine.io.catalog import load_table
    from airflow_provider_iceberg_exec.engine.ops.orphans import delete_orphan_files, read_orphan_scan_result

    catalog = _catalog(args.catalog)
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
        _table(args),
        older_than=args.older_than,
        retain_last=args.retain_last,
        snapshot_ids=args.snapshot_id,
        cleanup=not args.no_cleanup,
        dry_run=args.dry_run,
        max_concurrent_deletes=args.max_concurrent_deletes,
        limits=_limits(args),
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
        _table(args),
        operation=args.command,
        where=args.where,
        set_columns=assignments or None,
        source_files=getattr(args, "source", None) or (),
        branch=args.branch,
        isolation_level=args.isolation_level,
        limits=_limits(args),
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
        _table(args),
        where=args.where,
        options=_options(args.option),
        branch=args.branch,
        limits=_limits(args),
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


def _cmd_rewrite_manifests(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.config import parse_byte_size
    from airflow_provider_iceberg_exec.engine.ops.manifests import rewrite_manifests

    sort_by = [name.strip() for text in args.sort_by for name in text.split(",") if name.strip()]
    result = rewrite_manifests(
        _table(args),
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
        _table(args),
        where=args.where,
        options=_options(args.option),
        branch=args.branch,
        limits=_limits(args),
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="iceberg-exec", description="Bounded-memory Iceberg table maintenance."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--catalog", default="default", help="PyIceberg catalog name (default: %(default)s)")
    parser.add_argument("--debug", action="store_true", help="print the traceback of an unexpected error")
    commands = parser.add_subparsers(dest="command", required=True)

    def limits(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--memory-limit", default="256MiB", help="memory limit, e.g. 256MiB (default: %(default)s)"
        )
        p.add_argument("--spill-dir", help="directory for spill and staging files (default: the temp dir)")

    def planning(p: argparse.ArgumentParser) -> None:
        p.add_argument("table", help="NAMESPACE.TABLE")
        p.add_argument("--strategy", default="binpack", help="binpack or sort")
        p.add_argument(
            "--sort-order", help="for sort: 'col ASC NULLS LAST, ...' (default: the table's order)"
        )
        p.add_argument("--where", help="PyIceberg filter selecting the files to consider")
        p.add_argument(
            "--option", action="append", default=[], metavar="KEY=VALUE", help="Spark option, repeatable"
        )
        p.add_argument("--branch", default="main")

    compact = commands.add_parser("compact", help="plan, rewrite and commit (rewrite_data_files)")
    planning(compact)
    limits(compact)
    compact.add_argument("--commit-id", help="idempotency key of the commit (default: random)")
    compact.add_argument("--json", action="store_true", help="print the result document")
    compact.set_defaults(run=_cmd_compact)

    plan = commands.add_parser("plan", help="print the plan document (its tasks feed 'execute')")
    planning(plan)
    plan.add_argument("--output", "-o", help="write the document to this file")
    plan.set_defaults(run=_cmd_plan)

    execute = commands.add_parser("execute", help="rewrite the groups of a plan or task document")
    execute.add_argument("task", help="a plan or a task JSON file")
    execute.add_argument("--group", help="only this group id of a plan")
    execute.add_argument("--output", "-o", help="write the result document(s) to this file")
    limits(execute)
    execute.set_defaults(run=_cmd_execute)

    commit = commands.add_parser(
        "commit",
        help="commit result documents (compaction, copy-on-write or position deletes) with the commit "
        "operator's rules",
    )
    commit.add_argument("results", nargs="+", help="result JSON files (a document or a list)")
    commit.add_argument("--commit-id", required=True, help="idempotency key: the same id never commits twice")
    commit.add_argument(
        "--plan",
        help="the plan the results come from: tasks without a result then fail the commit, "
        "or are counted under partial-progress.enabled",
    )
    commit.add_argument("--table", help="NAMESPACE.TABLE (default: the one the results name)")
    commit.add_argument("--json", action="store_true", help="print the result document")
    commit.set_defaults(run=_cmd_commit)

    demo = commands.add_parser("demo", help="compact a fragmented demo table in a local SQLite catalog")
    demo.add_argument("--workdir", default="demo-warehouse")
    demo.add_argument("--memory-limit", default="256MiB")
    demo.add_argument("--engine-only", action="store_true", help="call the engine instead of running the DAG")
    demo.set_defaults(run=_cmd_demo)

    resolve = commands.add_parser(
        "resolve-deletes",
        help="rewrite the data files equality deletes apply to and drop those deletes (replace commit)",
    )
    resolve.add_argument("table", help="NAMESPACE.TABLE")
    resolve.add_argument("--where", help="PyIceberg filter selecting the files to consider")
    resolve.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="Spark option, repeatable"
    )
    resolve.add_argument("--branch", default="main")
    limits(resolve)
    resolve.add_argument("--commit-id", help="idempotency key of the commit (default: random)")
    resolve.add_argument("--json", action="store_true", help="print the result document")
    resolve.set_defaults(run=_cmd_resolve_deletes)

    _maintenance_commands(commands, limits)
    _cow_commands(commands, limits)
    _position_delete_commands(commands, limits)
    _delete_file_commands(commands, limits)
    _manifest_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None, out: IO[str] | None = None) -> int:
    """Run ``iceberg-exec``; returns the exit code."""
    import logging

    from airflow_provider_iceberg_exec.engine.errors import (
        CatalogUnavailableError,
        ConfigurationError,
        DataFileCodecError,
        IcebergExecError,
    )

    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        args.run(args, out or sys.stdout)
    except (ConfigurationError, DataFileCodecError, CatalogUnavailableError) as err:
        # Nothing was changed: the input, the configuration or the catalog's reachability needs fixing.
        print(f"iceberg-exec: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except IcebergExecError as err:
        print(f"iceberg-exec: error: {type(err).__name__}: {_one_line(err)}", file=sys.stderr)
        return 1
    except OSError as err:
        # The storage refused or failed (access denied, throttling, an unreachable endpoint).
        print(f"iceberg-exec: error: storage of catalog {args.catalog!r}: {_one_line(err)}", file=sys.stderr)
        return 1
    except Exception as err:
        # A failure nobody anticipated still gets one line; --debug shows where it came from.
        if args.debug:
            raise
        print(
            f"iceberg-exec: error: unexpected {type(err).__name__}: {_one_line(err)} "
            "(rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1
    return 0


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


if __name__ == "__main__":
    raise SystemExit(main())

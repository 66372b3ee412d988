"""``iceberg-exec``: every operation outside Airflow, with the same JSON documents the tasks exchange.

Catalogs are configured the PyIceberg way: ``--catalog NAME`` is read from ``~/.pyiceberg.yaml`` or from
``PYICEBERG_CATALOG__NAME__*`` environment variables. Exit codes: 0 success, 2 bad input (nothing was
changed), 1 any other failure.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import IO, Any

from airflow_provider_iceberg_exec import __version__

__all__ = ["main"]


def _catalog(name: str) -> Any:
    from pyiceberg.utils.config import Config

    from airflow_provider_iceberg_exec.engine.catalog import CatalogConfig, load_catalog
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    properties = Config().get_catalog_config(name)
    if not properties:
        raise ConfigurationError(
            f"catalog {name!r} is not configured; add it to ~/.pyiceberg.yaml or set "
            f"PYICEBERG_CATALOG__{name.upper()}__URI (and __TYPE, __WAREHOUSE)"
        )
    return load_catalog(CatalogConfig(name, {k: str(v) for k, v in properties.items()}))


def _table(args: argparse.Namespace) -> Any:
    from airflow_provider_iceberg_exec.engine.catalog import load_table

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


def _summary(result: dict[str, Any]) -> str:
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
    from airflow_provider_iceberg_exec.engine.compaction import compact

    result = compact(_table(args), limits=_limits(args), commit_id=args.commit_id, **_plan_args(args))
    out.write((json.dumps(result, indent=2, sort_keys=True) if args.json else _summary(result)) + "\n")


def _cmd_plan(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.compaction import plan_compaction

    _emit(plan_compaction(_table(args), **_plan_args(args)), args, out)


def _cmd_execute(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.compaction import execute_rewrite_task
    from airflow_provider_iceberg_exec.engine.contracts import COMPACTION_PLAN
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    doc = _read_json(args.task)
    tasks = doc["tasks"] if isinstance(doc, dict) and doc.get("schema") == COMPACTION_PLAN else [doc]
    if args.group:
        tasks = [t for t in tasks if t.get("group_id") == args.group]
        if not tasks:
            raise ConfigurationError(f"no task with group id {args.group!r} in {args.task}")
    if not tasks:
        _emit([], args, out)
        return
    from airflow_provider_iceberg_exec.engine.catalog import load_table

    table = load_table(_catalog(args.catalog), str(tasks[0]["table"]))
    limits = _limits(args)
    results = [execute_rewrite_task(table, task, limits) for task in tasks]
    _emit(results if len(results) != 1 or doc is not tasks[0] else results[0], args, out)


def _cmd_commit(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.catalog import load_table
    from airflow_provider_iceberg_exec.engine.compaction import commit_compaction

    results: list[Any] = []
    for path in args.results:
        doc = _read_json(path)
        results.extend(doc if isinstance(doc, list) else [doc])
    if not results:
        out.write("nothing to commit\n")
        return
    table = load_table(_catalog(args.catalog), str(results[0].get("table")))
    result = commit_compaction(table, results, commit_id=args.commit_id)
    out.write((json.dumps(result, indent=2, sort_keys=True) if args.json else _summary(result)) + "\n")


def _cmd_demo(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.demo import run_demo

    run_demo(args.workdir, memory_limit=args.memory_limit, out=out)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="iceberg-exec", description="Bounded-memory Iceberg table maintenance."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--catalog", default="default", help="PyIceberg catalog name (default: %(default)s)")
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

    commit = commands.add_parser("commit", help="commit result documents as replace snapshots")
    commit.add_argument("results", nargs="+", help="result JSON files (a document or a list)")
    commit.add_argument("--commit-id", required=True, help="idempotency key: the same id never commits twice")
    commit.add_argument("--json", action="store_true", help="print the result document")
    commit.set_defaults(run=_cmd_commit)

    demo = commands.add_parser("demo", help="compact a fragmented demo table in a local SQLite catalog")
    demo.add_argument("--workdir", default="demo-warehouse")
    demo.add_argument("--memory-limit", default="256MiB")
    demo.set_defaults(run=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None, out: IO[str] | None = None) -> int:
    """Run ``iceberg-exec``; returns the exit code."""
    import logging

    from airflow_provider_iceberg_exec.engine.errors import (
        ConfigurationError,
        DataFileCodecError,
        IcebergExecError,
    )

    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        args.run(args, out or sys.stdout)
    except (ConfigurationError, DataFileCodecError) as err:
        print(f"iceberg-exec: error: {err}", file=sys.stderr)
        return 2
    except IcebergExecError as err:
        print(f"iceberg-exec: error: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

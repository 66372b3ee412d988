"""The compaction commands: ``compact``, ``plan``, ``execute``, ``commit``, ``demo``, ``resolve-deletes``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import IO, Any

from airflow_provider_iceberg_exec.cli.common import (
    add_limits,
    catalog_named,
    emit,
    limits_of,
    options_of,
    read_json,
    table_of,
)


def _plan_args(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "where": args.where,
        "options": options_of(args.option),
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

    result = compact(table_of(args), limits=limits_of(args), commit_id=args.commit_id, **_plan_args(args))
    out.write((json.dumps(result, indent=2, sort_keys=True) if args.json else _summary(result)) + "\n")


def _cmd_resolve_deletes(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.ops.resolve import resolve_equality_deletes

    result = resolve_equality_deletes(
        table_of(args),
        where=args.where,
        limits=limits_of(args),
        commit_id=args.commit_id,
        branch=args.branch,
        options=options_of(args.option),
    )
    out.write((json.dumps(result, indent=2, sort_keys=True) if args.json else _summary(result)) + "\n")


def _cmd_plan(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.ops.compaction import plan_compaction

    emit(plan_compaction(table_of(args), **_plan_args(args)), args, out)


def _cmd_execute(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.contracts import COMPACTION_PLAN
    from airflow_provider_iceberg_exec.engine.documents import check_compaction_plan, check_rewrite_task
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
    from airflow_provider_iceberg_exec.engine.ops.compaction import execute_rewrite_task

    doc = read_json(args.task)
    is_plan = isinstance(doc, dict) and doc.get("schema") == COMPACTION_PLAN
    tasks = list(check_compaction_plan(doc)["tasks"]) if is_plan else [check_rewrite_task(doc)]
    if args.group:
        tasks = [t for t in tasks if t.get("group_id") == args.group]
        if not tasks:
            raise ConfigurationError(f"no task with group id {args.group!r} in {args.task}")
    if not tasks:
        emit([], args, out)
        return
    from airflow_provider_iceberg_exec.engine.io.catalog import load_table

    table = load_table(catalog_named(args.catalog), str(tasks[0]["table"]))
    limits = limits_of(args)
    results = [execute_rewrite_task(table, task, limits) for task in tasks]
    emit(results if is_plan else results[0], args, out)


def _cmd_commit(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.engine.contracts import REWRITE_RESULT
    from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError
    from airflow_provider_iceberg_exec.engine.io.catalog import load_table
    from airflow_provider_iceberg_exec.engine.ops.results import commit_results, results_table

    results: list[Any] = []
    for path in args.results:
        doc = read_json(path)
        results.extend(doc if isinstance(doc, list) else [doc])
    planned = None
    if args.plan:
        plan = read_json(args.plan)
        planned = plan.get("tasks") if isinstance(plan, dict) else plan
    if not all(isinstance(r, dict) for r in [*results, *(planned or [])]):
        raise DataFileCodecError("result and plan files must hold JSON documents or lists of them")
    name = results_table(args.table, results, planned or [])
    if name is None:
        out.write("nothing to commit\n")
        return
    table = load_table(catalog_named(args.catalog), name)
    result = commit_results(table, results, commit_id=args.commit_id, planned=planned)
    compaction = all(r.get("schema") == REWRITE_RESULT for r in results)
    out.write(
        (_summary(result) if compaction and not args.json else json.dumps(result, indent=2, sort_keys=True))
        + "\n"
    )


def _cmd_demo(args: argparse.Namespace, out: IO[str]) -> None:
    from airflow_provider_iceberg_exec.demo import run_demo

    run_demo(
        args.workdir,
        memory_limit=args.memory_limit,
        out=out,
        through_airflow=not args.engine_only,
        verbose=args.verbose,
    )


def add_commands(commands: Any) -> None:
    """Add the compaction commands to the ``iceberg-exec`` subparsers."""

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
    add_limits(compact)
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
    add_limits(execute)
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
    demo.add_argument(
        "--verbose", action="store_true", help="print Airflow's own log lines (default: to a file it names)"
    )
    demo.set_defaults(run=_cmd_demo, progress=False)  # it shows the progress task by task itself

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
    add_limits(resolve)
    resolve.add_argument("--commit-id", help="idempotency key of the commit (default: random)")
    resolve.add_argument("--json", action="store_true", help="print the result document")
    resolve.set_defaults(run=_cmd_resolve_deletes)

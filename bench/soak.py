"""Soak: writers, a copy-on-write deleter, compaction and orphan removal on one table, all at once.

Run by hand, never as a test::

    /work/main/.venv/bin/python bench/soak.py [--seconds 120] [--writers 4] [--older-than 60] [--json]
        [--out bench/out/soak] [--keep] [--no-snapshot]

The table lives in a PyIceberg ``SqlCatalog`` backed by a real PostgreSQL (``start_postgres`` of
``tests/integration/services.py``: started by the script on loopback, stopped at the end), its warehouse on
local disk. For ``--seconds``, each actor in its own process (started together at a barrier):

- ``writer-N`` (``--writers``, default 4): PyIceberg ``table.append`` of small batches (50-500 rows, one
  every ``--writer-pause`` = 0.5 s at most), each tagged with the snapshot property ``soak.batch=wN.bM``;
  PyIceberg retries a lost compare-and-swap itself (``commit.retry.*``: 10 retries, 20 ms-2 s); when it
  gives up (``CommitFailedException``) the same rows are appended again, up to 8 attempts;
- ``deleter``: ``cow_rewrite(table, operation="delete", where=...)`` of rows that are already committed,
  re-planned up to 4 times on a conflict;
- ``compactor``: ``compact(table, options={"min-input-files": "2"})``, every ``--compact-pause`` = 3 s
  (it rewrites the whole table each time, so every delete running meanwhile fails validation);
- ``orphans``: ``remove_orphan_files(table, older_than="<--older-than>s", force=True)`` every 3 s.

Without the writers' pause, four writers starve the engine's commits on a 2-core machine (each of their
attempts, re-validated after every lost swap, takes longer than an append, and ten retries run out).
The age fence holds as long as no call that writes files takes ``--older-than`` (60 s) to commit them:
every such call is timed, and one taking half of it is a warning, all of it an alert. PyIceberg's retry
loop (which the engine's commits use) stops after ``commit.retry.total-timeout-ms``, set from
``--commit-timeout`` (default 20 s); with PyIceberg's default of 30 minutes a compaction commit retried
for 85 s while orphan removal deleted its output (see docs/benchmarks.md).

**The model.** Row ``id = writer * 10**9 + seq``; every column is a function of ``(writer, seq)``, so the
expected rows can be rebuilt from their ids. A writer numbers its rows consecutively and logs a batch (as
``committed`` or ``not_committed``) only after its outcome is settled: after ``append`` returned, or after
it raised and a look-up of the batch's tag in the refreshed table said whether it landed (a
``CommitFailedException`` is checked too; commit-state-unknown errors are settled this way, or at the end
when even the look-up failed). A writer works on one batch at a time, so once batch ``b`` is logged every
``seq`` below its end is settled for good: the writer's *high-water mark*. The deleter only deletes below
the marks it read from the logs, in three shapes: ``writer = w and seq >= lo and seq < hi`` (whole files
dropped and edges rewritten), the same ``and bucket = k`` (``bucket = id % 97``: a few rows of many files)
and ``id in (...)`` (a few single rows). The appends running meanwhile hold only rows above the marks, so
they cannot conflict with the delete (their column bounds prove it) and no row appended later can match
it: the live rows at the end are exactly the committed rows minus those matching a committed delete,
whatever the order of commits. The deleter logs a delete only once settled (result, or commit id looked
up in the table). Compaction and orphan removal must not change any row.

**Checks at the end** (each in its own child, a reader other than the engine): the live rows read by
PyIceberg's ``table.scan().to_arrow()``, their count and the order-independent checksum of
``bench/compaction.py`` (per-column 64-bit words mixed per row, summed mod 2**64) against the model's rows;
missing, extra and duplicate ids are listed with their batch; every delete's ``deleted_rows`` against the
model's replay; the ``soak.batch`` tags on the branch against the batches logged as committed; every file
any snapshot references (manifest lists, manifests, data files, metadata log) exists; no file on an orphan
list that the final metadata references is gone; the planted old orphans are gone and no planted young file
(one per orphan run, ``mtime`` = now) went before it was ``--older-than`` old. Then, with the actors
stopped, one more compaction and an orphan removal with ``older_than=0s``, and the same checks again:
files before/after.

Every exception in an actor is counted and classified, never fatal: ``conflict``
(``CommitFailedException``, ``CommitConflictError``, ``CommitValidationError``), ``unknown`` (commit state
unknown), ``failure`` (another engine error) or ``unexpected`` (anything else, reported loudly with its
traceback). Peak RSS per process is its ``ru_maxrss`` (``wait4``), the load average is sampled every 5 s.
Children import a copy of ``airflow_provider_iceberg_exec/`` taken at the start (others edit the engine;
``--no-snapshot`` imports the work tree). Results go to ``--out/soak-results-<stamp>.json``; ``--json``
prints that document instead of the table. Exit status 1 when a check fails or an actor hit an unexpected
exception or an alert. ``--inject lost-batch|phantom-delete`` logs a wrong outcome on purpose, to see the
checks fail. The warehouse and logs of a failed run are kept under ``--out/runs/<stamp>``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import glob
import hashlib
import importlib.util
import json
import logging
import os
import platform
import random
import shlex
import shutil
import subprocess
import sys
import time
import traceback
from typing import Any

MiB = 1024 * 1024
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CODE_ROOT_ENV = "ICEBERG_EXEC_BENCH_CODE_ROOT"
CATALOG = "soak"
NAMESPACE = "soak"
TABLE = "soak.events"
ID_BASE = 10**9
BUCKETS = 97
BATCH_PROPERTY = "soak.batch"
COMMIT_ID_PROPERTY = "iceberg-exec.commit-id"
TS0 = 1_700_000_000_000_000
PAD = "abcdefghijklmnopq"
WRITER_ATTEMPTS = 8
DELETE_ATTEMPTS = 4
#: how long after the deadline an actor may still retry the operation it started before it
GRACE_SECONDS = 30.0
SAMPLES_PER_KIND = 3
PLANTED_OLD = 6
TABLE_PROPERTIES = {
    "commit.retry.num-retries": "10",
    "commit.retry.min-wait-ms": "20",
    "commit.retry.max-wait-ms": "2000",
}
PYICEBERG_RETRY_MESSAGE = "Commit failed due to a concurrent update, retrying"


# ---------------------------------------------------------------------------------------------- rows


def _compaction_bench() -> Any:
    """bench/compaction.py as a module, for its checksum."""
    spec = importlib.util.spec_from_file_location("bench_compaction", os.path.join(HERE, "compaction.py"))
    if spec is None or spec.loader is None:
        raise RuntimeError("cannot load bench/compaction.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_compaction"] = module
    spec.loader.exec_module(module)
    return module


def _iceberg_schema() -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType, TimestamptzType

    return Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "writer", IntegerType(), required=True),
        NestedField(3, "seq", LongType(), required=True),
        NestedField(4, "bucket", IntegerType(), required=True),
        NestedField(5, "name", StringType(), required=False),
        NestedField(6, "amount", DoubleType(), required=False),
        NestedField(7, "ts", TimestamptzType(), required=False),
    )


def rows_for_ids(ids: Any) -> Any:
    """The rows of ``ids`` (numpy int64): every column is a function of ``(writer, seq)``."""
    import numpy as np
    import pyarrow as pa

    ids = np.asarray(ids, dtype=np.int64)
    writer, seq = ids // ID_BASE, ids % ID_BASE
    names = [f"w{w}-s{s}-{PAD[: s % 17]}" for w, s in zip(writer.tolist(), seq.tolist(), strict=True)]
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("writer", pa.int32(), nullable=False),
            pa.field("seq", pa.int64(), nullable=False),
            pa.field("bucket", pa.int32(), nullable=False),
            pa.field("name", pa.string()),
            pa.field("amount", pa.float64()),
            pa.field("ts", pa.timestamp("us", tz="UTC")),
        ]
    )
    return pa.Table.from_arrays(
        [
            pa.array(ids, pa.int64()),
            pa.array(writer.astype(np.int32), pa.int32()),
            pa.array(seq, pa.int64()),
            pa.array((ids % BUCKETS).astype(np.int32), pa.int32()),
            pa.array(names, pa.string()),
            pa.array(seq * 0.25 + writer, pa.float64(), mask=(seq % 11 == 0)),
            pa.array(TS0 + ids * 1000, pa.timestamp("us", tz="UTC")),
        ],
        schema=schema,
    )


def batch_rows(writer: int, first_seq: int, count: int) -> Any:
    import numpy as np

    return rows_for_ids(writer * ID_BASE + np.arange(first_seq, first_seq + count, dtype=np.int64))


# ------------------------------------------------------------------------------------ child plumbing


def _catalog(cfg: dict[str, Any]) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(CATALOG, uri=cfg["uri"], warehouse=cfg["warehouse"])


def _limits(cfg: dict[str, Any], actor: str) -> Any:
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits

    spill = os.path.join(cfg["run_dir"], "spill", actor)
    os.makedirs(spill, exist_ok=True)
    return ResourceLimits(memory_limit_bytes=cfg["memory_limit_mib"] * MiB, spill_dir=spill)


def _classify(err: BaseException) -> str:
    from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

    from airflow_provider_iceberg_exec.engine.errors import (
        CommitConflictError,
        CommitStateUnknownError,
        IcebergExecError,
    )

    if isinstance(err, (CommitFailedException, CommitConflictError)):  # CommitValidationError included
        return "conflict"
    if isinstance(err, (CommitStateUnknownError, CommitStateUnknownException)):
        return "unknown"
    if isinstance(err, IcebergExecError):
        return "failure"
    return "unexpected"


class _RetryCounter(logging.Handler):
    """Counts PyIceberg's own commit retries (a lost compare-and-swap, retried inside commit_transaction)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith(PYICEBERG_RETRY_MESSAGE):
            self.count += 1


class Stats:
    """What one actor did: operations, commits, conflicts by type, retries, failures, op durations."""

    def __init__(self, actor: str, retry_counter: _RetryCounter, fence_seconds: float) -> None:
        self.actor = actor
        self.retry_counter = retry_counter
        self.fence_seconds = fence_seconds
        self.attempt_seconds: list[float] = []
        self.counts: collections.Counter[str] = collections.Counter()
        self.errors: dict[str, collections.Counter[str]] = {
            k: collections.Counter() for k in ("conflict", "unknown", "failure", "unexpected")
        }
        self.samples: list[dict[str, Any]] = []
        self.op_seconds: list[float] = []
        self.commit_times: list[float] = []
        self.extra: dict[str, Any] = {}
        self.start = 0.0

    def error(self, err: BaseException, what: str) -> str:
        kind = _classify(err)
        name = f"{type(err).__module__}.{type(err).__name__}"
        self.errors[kind][name] += 1
        if sum(1 for s in self.samples if s["type"] == name) < SAMPLES_PER_KIND:
            self.samples.append(
                {
                    "kind": kind,
                    "type": name,
                    "during": what,
                    "at_seconds": round(time.time() - self.start, 2),
                    "message": str(err)[:2000],
                    "traceback": traceback.format_exc()[-6000:] if kind != "conflict" else None,
                }
            )
        level = logging.INFO if kind == "conflict" else logging.ERROR
        logging.getLogger("soak").log(
            level, "%s during %s: %s: %s", kind, what, name, err, exc_info=kind != "conflict"
        )
        return kind

    def loud(self, alert: str, *, fatal: bool = True, **details: Any) -> None:
        """Something that must not happen (``fatal``: fails the run), or that comes close (a warning)."""
        kind = "alert" if fatal else "warning"
        self.counts[f"{kind.upper()} {alert}"] += 1
        self.samples.append(
            {"kind": kind, "type": alert, "at_seconds": round(time.time() - self.start, 2), **details}
        )
        logging.getLogger("soak").error("%s %s: %s", kind.upper(), alert, details)

    @contextlib.contextmanager
    def attempt(self, what: str) -> Any:
        """Time one call that writes files and commits them: it must end well within the orphan age fence."""
        started = time.monotonic()
        try:
            yield
        finally:
            seconds = time.monotonic() - started
            self.attempt_seconds.append(seconds)
            if seconds >= self.fence_seconds / 2:
                # Files written at the start of the call could be orphan candidates before it commits.
                fatal = seconds >= self.fence_seconds
                self.loud(
                    "a writing call outlived the orphan age fence"
                    if fatal
                    else "a writing call took half the orphan age fence or more",
                    fatal=fatal,
                    what=what,
                    seconds=round(seconds, 1),
                )

    def committed(self) -> None:
        self.counts["commits"] += 1
        self.commit_times.append(round(time.time() - self.start, 3))

    def to_json(self) -> dict[str, Any]:
        return {
            "actor": self.actor,
            "counts": dict(self.counts),
            "conflicts": dict(self.errors["conflict"]),
            "unknown": dict(self.errors["unknown"]),
            "failures": dict(self.errors["failure"]),
            "unexpected": dict(self.errors["unexpected"]),
            "pyiceberg_retries": self.retry_counter.count,
            "samples": self.samples,
            "ops": len(self.op_seconds),
            "max_op_seconds": round(max(self.op_seconds, default=0.0), 3),
            "mean_op_seconds": round(sum(self.op_seconds) / len(self.op_seconds), 3)
            if self.op_seconds
            else 0.0,
            "max_attempt_seconds": round(max(self.attempt_seconds), 3) if self.attempt_seconds else "-",
            "commit_times": self.commit_times,
            **self.extra,
        }


def _backoff(attempt: int) -> None:
    time.sleep(random.uniform(0.5, 1.0) * min(2.0, 0.05 * 2**attempt))


def _refreshed(table: Any, stats: Stats) -> bool:
    """Refresh the table, retrying a few times; False when it kept failing (counted)."""
    for attempt in range(5):
        try:
            table.refresh()
            return True
        except Exception as err:
            stats.error(err, "refresh")
            _backoff(attempt)
    return False


def _snapshot_with(table: Any, key: str, value: str, prefix: bool = False) -> int | None:
    """The id of a snapshot whose summary has ``key`` = ``value`` (or ``value.<n>``), else None."""
    for snapshot in table.metadata.snapshots:
        found = snapshot.summary.additional_properties.get(key) if snapshot.summary else None
        if found == value or (prefix and found is not None and found.startswith(value + ".")):
            return int(snapshot.snapshot_id)
    return None


def _landed(table: Any, stats: Stats, key: str, value: str, prefix: bool = False) -> bool | None:
    """Whether a commit tagged ``key=value`` is in the table: True, False, or None when unknowable now."""
    if not _refreshed(table, stats):
        return None
    return _snapshot_with(table, key, value, prefix) is not None


def _wait_for_go(cfg: dict[str, Any], actor: str) -> tuple[float, float]:
    with open(os.path.join(cfg["run_dir"], "ready", actor), "w") as f:
        f.write(str(os.getpid()))
    go = os.path.join(cfg["run_dir"], "go.json")
    deadline = time.monotonic() + 600
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise TimeoutError("never told to go")
        time.sleep(0.02)
    with open(go) as f:
        times = json.load(f)
    while time.time() < times["start"]:
        time.sleep(0.005)
    return float(times["start"]), float(times["until"])


def _log_line(log: Any, record: dict[str, Any]) -> None:
    log.write(json.dumps(record, sort_keys=True) + "\n")
    log.flush()


# ------------------------------------------------------------------------------------------- actors


def actor_writer(cfg: dict[str, Any], stats: Stats, index: int) -> None:
    table = _catalog(cfg).load_table(TABLE)
    rng = random.Random(cfg["seed"] * 1000 + index)
    batch_rows(index, 0, 1)  # warm the imports before the start
    seq = batch = 0
    with open(os.path.join(cfg["run_dir"], "logs", f"writer-{index}.jsonl"), "a") as log:
        stats.start, until = _wait_for_go(cfg, stats.actor)
        while time.time() < until:
            count = rng.randint(cfg["min_rows"], cfg["max_rows"])
            tag = f"w{index}.b{batch}"
            started = time.monotonic()
            status, attempts = _append(table, batch_rows(index, seq, count), tag, stats, until)
            if cfg["inject"] == "lost-batch" and index == 0 and batch == 3 and status == "committed":
                status = "not_committed"  # a wrong log on purpose: the checks must catch it
            stats.op_seconds.append(time.monotonic() - started)
            _log_line(
                log,
                {
                    "batch": batch,
                    "tag": tag,
                    "seq": seq,
                    "rows": count,
                    "status": status,
                    "attempts": attempts,
                },
            )
            seq += count
            batch += 1
            if cfg["writer_pause"]:
                time.sleep(cfg["writer_pause"])
    stats.extra["batches"] = batch
    stats.extra["rows_offered"] = seq


def _append(table: Any, rows: Any, tag: str, stats: Stats, until: float) -> tuple[str, int]:
    """Append ``rows`` tagged ``tag`` until it lands: ``(committed | not_committed | unknown, attempts)``."""
    for attempt in range(1, WRITER_ATTEMPTS + 1):
        stats.counts["attempts"] += 1
        try:
            with stats.attempt(f"append {tag}"):
                table.append(rows, snapshot_properties={BATCH_PROPERTY: tag})
        except Exception as err:
            kind = stats.error(err, f"append {tag}")
            landed = _landed(table, stats, BATCH_PROPERTY, tag)
            if landed is None:
                stats.counts["unsettled"] += 1
                return "unknown", attempt  # settled at the end from the final metadata
            if landed:
                if kind == "conflict":
                    stats.loud("append raised a conflict but landed", tag=tag, error=repr(err)[:500])
                stats.counts["landed_after_error"] += 1
                stats.committed()
                return "committed", attempt
            if attempt == WRITER_ATTEMPTS or time.time() > until + GRACE_SECONDS:
                stats.counts["gave_up"] += 1
                return "not_committed", attempt
            stats.counts["retries"] += 1
            _backoff(attempt)
            continue
        stats.committed()
        return "committed", attempt
    raise AssertionError("unreachable")


def _high_water(cfg: dict[str, Any]) -> dict[int, int]:
    """Per writer, the end ``seq`` of its last settled batch (every row below it is settled for good)."""
    marks: dict[int, int] = {}
    for index in range(cfg["writers"]):
        path = os.path.join(cfg["run_dir"], "logs", f"writer-{index}.jsonl")
        last = None
        with contextlib.suppress(FileNotFoundError), open(path) as f:
            for line in f:
                with contextlib.suppress(ValueError):
                    last = json.loads(line)  # a half-written last line is skipped
        if last is not None:
            marks[index] = int(last["seq"]) + int(last["rows"])
    return marks


def pick_delete(rng: random.Random, marks: dict[int, int]) -> dict[str, Any] | None:
    """A delete predicate over settled rows only (below the writers' high-water marks)."""
    ready = sorted(w for w, mark in marks.items() if mark >= 200)
    if not ready:
        return None
    writer = rng.choice(ready)
    mark = marks[writer]
    kind = rng.choice(("range", "bucket", "ids"))
    spec: dict[str, Any] = {"kind": kind, "writer": writer, "mark": mark}
    if kind == "range":
        width = rng.randint(10, 400)
        lo = rng.randrange(0, mark - width)
        spec.update(lo=lo, hi=lo + width, where=f"writer = {writer} and seq >= {lo} and seq < {lo + width}")
    elif kind == "bucket":
        lo = rng.randrange(0, mark // 2)
        hi = rng.randint(lo + 1, mark)
        bucket = rng.randrange(BUCKETS)
        spec.update(
            lo=lo,
            hi=hi,
            bucket=bucket,
            where=f"writer = {writer} and seq >= {lo} and seq < {hi} and bucket = {bucket}",
        )
    else:
        ids = sorted(
            {(w := rng.choice(ready)) * ID_BASE + rng.randrange(marks[w]) for _ in range(rng.randint(1, 8))}
        )
        spec.update(
            ids=ids, marks={str(w): marks[w] for w in ready}, where=f"id in ({', '.join(map(str, ids))})"
        )
    return spec


def actor_deleter(cfg: dict[str, Any], stats: Stats) -> None:
    from airflow_provider_iceberg_exec.engine.ops.cow import cow_rewrite

    table = _catalog(cfg).load_table(TABLE)
    limits = _limits(cfg, stats.actor)
    rng = random.Random(cfg["seed"] * 1000 + 101)
    number = 0
    with open(os.path.join(cfg["run_dir"], "logs", "deleter.jsonl"), "a") as log:
        stats.start, until = _wait_for_go(cfg, stats.actor)
        while time.time() < until:
            spec = pick_delete(rng, _high_water(cfg))
            if spec is None:
                time.sleep(0.2)
                continue
            started = time.monotonic()
            if cfg["inject"] == "phantom-delete" and number == 0:
                # A delete logged as committed that never ran: the checks must catch it.
                record = {"status": "committed", "commit_id": "phantom", "attempts": 0, "deleted_rows": None}
            else:
                record = _delete(cow_rewrite, table, limits, spec, number, stats, until)
            stats.op_seconds.append(time.monotonic() - started)
            _log_line(log, {"number": number, **spec, **record})
            number += 1
            time.sleep(cfg["delete_pause"])
    stats.extra["deletes"] = number


def _delete(
    cow_rewrite: Any, table: Any, limits: Any, spec: dict[str, Any], number: int, stats: Stats, until: float
) -> dict[str, Any]:
    """Run one delete until it is settled; re-planned after a conflict."""
    for attempt in range(1, DELETE_ATTEMPTS + 1):
        commit_id = f"soak-delete-{number}-{attempt}"
        stats.counts["attempts"] += 1
        try:
            with stats.attempt(f"delete {number}"):
                out = cow_rewrite(
                    table, operation="delete", where=spec["where"], commit_id=commit_id, limits=limits
                )
        except Exception as err:
            kind = stats.error(err, f"delete {number}")
            landed = _landed(table, stats, COMMIT_ID_PROPERTY, commit_id)
            if landed is None:
                stats.counts["unsettled"] += 1
                return {"status": "unknown", "commit_id": commit_id, "attempts": attempt}
            if landed:
                if kind == "conflict":
                    stats.loud(
                        "delete raised a conflict but landed", commit_id=commit_id, error=repr(err)[:500]
                    )
                stats.counts["landed_after_error"] += 1
                stats.committed()
                return {
                    "status": "committed",
                    "commit_id": commit_id,
                    "attempts": attempt,
                    "deleted_rows": None,
                }
            if attempt == DELETE_ATTEMPTS or time.time() > until + GRACE_SECONDS:
                stats.counts["gave_up"] += 1
                return {"status": "not_committed", "commit_id": commit_id, "attempts": attempt}
            stats.counts["retries"] += 1
            _backoff(attempt)
            continue
        if out["snapshot_ids"]:
            stats.committed()
            status = "committed"
        else:
            stats.counts["noops"] += 1
            status = "noop"
        stats.counts["deleted_rows"] += int(out["deleted_rows"])
        return {
            "status": status,
            "commit_id": commit_id,
            "attempts": attempt,
            "deleted_rows": int(out["deleted_rows"]),
            "snapshot_ids": out["snapshot_ids"],
            "removed_files": out["deleted_data_files_count"],
            "added_files": out["added_data_files_count"],
        }
    raise AssertionError("unreachable")


def actor_compactor(cfg: dict[str, Any], stats: Stats) -> None:
    from airflow_provider_iceberg_exec.engine.ops.compaction import compact

    table = _catalog(cfg).load_table(TABLE)
    limits = _limits(cfg, stats.actor)
    number = 0
    stats.start, until = _wait_for_go(cfg, stats.actor)
    last_conflicted = False
    while time.time() < until:
        commit_id = f"soak-compact-{number}"
        stats.counts["attempts"] += 1
        if last_conflicted:
            stats.counts["retries"] += 1
        started = time.monotonic()
        try:
            with stats.attempt(f"compact {number}"):
                out = compact(table, options={"min-input-files": "2"}, limits=limits, commit_id=commit_id)
        except Exception as err:
            kind = stats.error(err, f"compact {number}")
            last_conflicted = kind == "conflict"
            if _landed(table, stats, COMMIT_ID_PROPERTY, commit_id, prefix=True):
                if kind == "conflict":
                    stats.loud("compaction raised a conflict but landed", commit_id=commit_id)
                stats.counts["landed_after_error"] += 1
                stats.committed()
        else:
            last_conflicted = False
            if out["snapshot_ids"]:
                stats.committed()
                stats.counts["rewritten_files"] += int(out["rewritten_data_files_count"])
                stats.counts["added_files"] += int(out["added_data_files_count"])
            else:
                stats.counts["noops"] += 1
        stats.op_seconds.append(time.monotonic() - started)
        number += 1
        time.sleep(cfg["compact_pause"])


def _plant(path: str, mtime: float | None = None) -> None:
    with open(path, "wb") as f:
        f.write(b"not referenced by anything: soak.py planted it\n")
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def actor_orphans(cfg: dict[str, Any], stats: Stats) -> None:
    from airflow_provider_iceberg_exec.engine.ops.orphans import remove_orphan_files

    table = _catalog(cfg).load_table(TABLE)
    limits = _limits(cfg, stats.actor)
    data_dir = os.path.join(cfg["table_dir"], "data")
    lists = os.path.join(cfg["run_dir"], "orphan-lists")
    older = float(cfg["older_than"])
    planted: list[dict[str, Any]] = []
    totals: collections.Counter[str] = collections.Counter()
    stats.start, until = _wait_for_go(cfg, stats.actor)
    number = 0
    while time.time() < until:
        path = os.path.join(data_dir, f"soak-planted-young-{number:05d}.parquet")
        _plant(path)
        planted.append({"path": path, "mtime": os.stat(path).st_mtime, "gone_after": None})
        stats.counts["attempts"] += 1
        started = time.monotonic()
        try:
            out = remove_orphan_files(
                table,
                older_than=f"{cfg['older_than']}s",
                force=True,
                limits=limits,
                orphan_list_uri=os.path.join(lists, f"scan-{number:05d}.txt"),
            )
        except Exception as err:
            stats.error(err, f"orphan run {number}")
        else:
            stats.committed()
            totals["orphans_found"] += int(out["orphan_file_count"])
            for key in ("deleted_file_count", "skipped_referenced_count", "skipped_younger_count"):
                totals[key] += int(out["delete"][key])
            for key in ("missing_file_count", "failed_file_count"):
                totals[key] += int(out["delete"][key])
            if out["delete"]["skipped_referenced_count"]:
                stats.loud(
                    "an orphan candidate was referenced when it was to be deleted (outlived the age fence?)",
                    sample=out["delete"]["skipped_referenced_sample"],
                )
        ended = time.time()
        stats.op_seconds.append(time.monotonic() - started)
        _check_planted(planted, ended, older, stats)
        number += 1
        time.sleep(cfg["orphan_pause"])
    stats.extra["orphan_totals"] = dict(totals)
    stats.extra["planted_young"] = len(planted)
    stats.extra["planted_young_deleted"] = sum(1 for p in planted if p["gone_after"] is not None)


def _check_planted(planted: list[dict[str, Any]], ended: float, older: float, stats: Stats) -> None:
    """A planted young file may go only once it is ``older`` seconds old (the run ended by ``ended``)."""
    for entry in planted:
        if entry["gone_after"] is None and not os.path.exists(entry["path"]):
            entry["gone_after"] = ended
            age = ended - entry["mtime"]
            if age < older:
                stats.loud(
                    "orphan removal deleted a file younger than older_than", path=entry["path"], age=age
                )


ACTORS = {
    "writer": actor_writer,
    "deleter": actor_deleter,
    "compactor": actor_compactor,
    "orphans": actor_orphans,
}


def run_actor(cfg: dict[str, Any], role: str, index: int) -> dict[str, Any]:
    counter = _RetryCounter()
    logging.getLogger("pyiceberg").addHandler(counter)
    actor = f"writer-{index}" if role == "writer" else role
    stats = Stats(actor, counter, float(cfg["older_than"]))
    try:
        if role == "writer":
            actor_writer(cfg, stats, index)
        else:
            ACTORS[role](cfg, stats)
    except Exception as err:  # the actor's own machinery failed: report it, do not hide it
        stats.error(err, "actor body (stopped the actor)")
        stats.counts["actor_crashed"] += 1
    stats.extra["stopped_at_seconds"] = round(time.time() - stats.start, 2) if stats.start else None
    return stats.to_json()


# -------------------------------------------------------------------------------------- set-up, checks


def setup(cfg: dict[str, Any]) -> dict[str, Any]:
    catalog = _catalog(cfg)
    catalog.create_namespace_if_not_exists(NAMESPACE)
    properties = dict(TABLE_PROPERTIES)
    if cfg["commit_timeout"]:
        properties["commit.retry.total-timeout-ms"] = str(int(cfg["commit_timeout"] * 1000))
    table = catalog.create_table(TABLE, schema=_iceberg_schema(), properties=properties)
    root = table.location().removeprefix("file://")
    old = time.time() - 2 * 86400
    planted = []
    for folder in ("data", "metadata"):
        os.makedirs(os.path.join(root, folder), exist_ok=True)
        for number in range(PLANTED_OLD // 2):
            path = os.path.join(
                root, folder, f"soak-planted-old-{number}.{'parquet' if folder == 'data' else 'avro'}"
            )
            _plant(path, old)
            planted.append(path)
    return {"location": table.location(), "table_dir": root, "planted_old": planted}


def _read_logs(path_pattern: str) -> list[dict[str, Any]]:
    records = []
    for path in sorted(glob.glob(path_pattern)):
        with open(path) as f:
            for line in f:
                records.append(json.loads(line))  # the writers are done: every line is whole
    return records


def _writer_model(
    cfg: dict[str, Any], tags: dict[str, int]
) -> tuple[Any, list[dict[str, Any]], dict[str, Any]]:
    """Committed ids (sorted), every logged batch, and the tag cross-check against the table."""
    import numpy as np

    batches, parts, report = [], [], collections.Counter()
    logged_committed = set()
    for index in range(cfg["writers"]):
        for rec in _read_logs(os.path.join(cfg["run_dir"], "logs", f"writer-{index}.jsonl")):
            status = rec["status"]
            if status == "unknown":  # settled now, from the final metadata
                status = "committed" if rec["tag"] in tags else "not_committed"
                report[f"unknown_settled_{status}"] += 1
            report[f"batches_{status}"] += 1
            batches.append({"writer": index, **rec, "status": status})
            if status == "committed":
                logged_committed.add(rec["tag"])
                parts.append(
                    index * ID_BASE + np.arange(rec["seq"], rec["seq"] + rec["rows"], dtype=np.int64)
                )
    ids = np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
    tag_check = {
        **report,
        "tags_in_table": len(tags),
        "committed_not_in_table": sorted(logged_committed - set(tags))[:50],
        "in_table_not_logged_committed": sorted(set(tags) - logged_committed)[:50],
    }
    return ids, batches, tag_check


def _matches(spec: dict[str, Any], ids: Any) -> Any:
    """The model's evaluation of a delete predicate over ``ids``."""
    import numpy as np

    if spec["kind"] == "ids":
        return np.isin(ids, np.asarray(spec["ids"], dtype=np.int64))
    writer, seq = ids // ID_BASE, ids % ID_BASE
    mask = (writer == spec["writer"]) & (seq >= spec["lo"]) & (seq < spec["hi"])
    if spec["kind"] == "bucket":
        mask &= ids % BUCKETS == spec["bucket"]
    return mask


def build_model(cfg: dict[str, Any], tags: dict[str, int], commit_ids: set[str]) -> dict[str, Any]:
    """The expected live ids: committed rows minus those a committed delete matched, replayed in order."""
    import numpy as np

    ids, batches, tag_check = _writer_model(cfg, tags)
    alive = np.ones(len(ids), dtype=bool)
    deletes = _read_logs(os.path.join(cfg["run_dir"], "logs", "deleter.jsonl"))
    statuses: collections.Counter[str] = collections.Counter()
    mismatched = []
    for rec in deletes:
        status = rec["status"]
        if status == "unknown":
            status = "committed" if rec["commit_id"] in commit_ids else "not_committed"
        statuses[status] += 1
        if status not in ("committed", "noop"):
            continue
        hit = _matches(rec, ids) & alive
        expected = int(hit.sum())
        alive &= ~hit
        if rec.get("deleted_rows") is not None and rec["deleted_rows"] != expected:
            mismatched.append(
                {
                    "number": rec["number"],
                    "where": rec["where"],
                    "reported": rec["deleted_rows"],
                    "model": expected,
                }
            )
        if status == "noop" and expected:
            mismatched.append(
                {"number": rec["number"], "where": rec["where"], "noop_but_model_deletes": expected}
            )
    return {
        "ids": ids[alive],
        "committed_rows": len(ids),
        "deleted_rows": int((~alive).sum()),
        "batches": batches,
        "tag_check": tag_check,
        "deletes": dict(statuses),
        "delete_count_mismatches": mismatched,
    }


def _describe_ids(
    ids: Any, batches: list[dict[str, Any]], deletes: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """For a few ids: writer, seq, the batch that wrote it and the deletes whose predicate matches it."""
    import numpy as np

    out = []
    for value in ids[:20].tolist():
        writer, seq = divmod(value, ID_BASE)
        batch = next(
            (
                f"{b['tag']} (logged {b['status']})"
                for b in batches
                if b["writer"] == writer and b["seq"] <= seq < b["seq"] + b["rows"]
            ),
            None,
        )
        hits = [d["number"] for d in deletes if bool(_matches(d, np.asarray([value]))[0])]
        out.append({"id": value, "writer": writer, "seq": seq, "batch": batch, "deletes_matching": hits})
    return out


def _referenced(table: Any) -> tuple[set[str], dict[str, int]]:
    """Every file any snapshot or the metadata log references, as plain paths; with counts per kind."""
    io, metadata = table.io, table.metadata
    paths = {table.metadata_location}
    paths.update(e.metadata_file for e in metadata.metadata_log)
    manifests: dict[str, Any] = {}
    for snapshot in metadata.snapshots:
        paths.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            manifests.setdefault(manifest.manifest_path, manifest)
    content = set()
    for manifest in manifests.values():
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
            content.add(entry.data_file.file_path)
    paths.update(manifests)
    paths |= content
    kinds = {
        "manifest_lists": len(metadata.snapshots),
        "manifests": len(manifests),
        "content_files": len(content),
    }
    return {p.removeprefix("file://") for p in paths}, kinds


def _files_on_disk(root: str) -> dict[str, int]:
    counts = {}
    for folder in ("data", "metadata"):
        counts[folder] = sum(len(names) for _d, _s, names in os.walk(os.path.join(root, folder)))
    return counts


def check(cfg: dict[str, Any], phase: str) -> dict[str, Any]:
    """Read the table with PyIceberg, compare with the model, check every referenced file exists."""
    import numpy as np

    cb = _compaction_bench()
    table = _catalog(cfg).load_table(TABLE)
    metadata = table.metadata
    ancestry = _ancestry(metadata)
    tags = _tags(ancestry)
    commit_ids = {
        s.summary.additional_properties[COMMIT_ID_PROPERTY]
        for s in metadata.snapshots
        if s.summary and COMMIT_ID_PROPERTY in s.summary.additional_properties
    }
    started = time.monotonic()
    result: dict[str, Any] = {"phase": phase}
    try:
        live = table.scan().to_arrow()
    except Exception as err:
        result["scan_error"] = f"{type(err).__name__}: {err}"[:2000]
        live = None
    result["scan_seconds"] = round(time.monotonic() - started, 2)
    model = build_model(cfg, {t: s[0] for t, s in tags.items()}, commit_ids)
    expected_ids = model["ids"]
    want_rows, want_sum = cb.checksum_batches(rows_for_ids(expected_ids).to_batches(max_chunksize=65536))
    result["model"] = {
        "rows": want_rows,
        "checksum": want_sum,
        "committed_rows": model["committed_rows"],
        "deleted_rows": model["deleted_rows"],
        "deletes": model["deletes"],
        "delete_count_mismatches": model["delete_count_mismatches"],
        "tag_check": model["tag_check"],
        "duplicate_tags": {t: s for t, s in tags.items() if len(s) > 1},
    }
    if live is not None:
        got_rows, got_sum = cb.checksum_batches(live.to_batches(max_chunksize=65536))
        got_ids = np.sort(live.column("id").to_numpy())
        deletes = _read_logs(os.path.join(cfg["run_dir"], "logs", "deleter.jsonl"))
        result["table"] = {
            "rows": got_rows,
            "checksum": got_sum,
            "duplicate_ids": int(len(got_ids) - len(np.unique(got_ids))),
            "missing": _describe_ids(np.setdiff1d(expected_ids, got_ids), model["batches"], deletes),
            "missing_count": len(np.setdiff1d(expected_ids, got_ids)),
            "extra": _describe_ids(np.setdiff1d(got_ids, expected_ids), model["batches"], deletes),
            "extra_count": len(np.setdiff1d(got_ids, expected_ids)),
        }
        result["match"] = (got_rows, got_sum) == (want_rows, want_sum)
    else:
        result["match"] = False
    result.update(_file_checks(cfg, table))
    result["snapshots"] = len(metadata.snapshots)
    result["ancestry"] = len(ancestry)
    result["ok"] = _ok(result)
    return result


def _ancestry(metadata: Any) -> list[Any]:
    out, snapshot = [], metadata.current_snapshot()
    while snapshot is not None:
        out.append(snapshot)
        snapshot = (
            metadata.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
        )
    return out


def _tags(snapshots: list[Any]) -> dict[str, list[int]]:
    tags: dict[str, list[int]] = collections.defaultdict(list)
    for s in snapshots:
        tag = s.summary.additional_properties.get(BATCH_PROPERTY) if s.summary else None
        if tag is not None:
            tags[tag].append(int(s.snapshot_id))
    return dict(tags)


def _file_checks(cfg: dict[str, Any], table: Any) -> dict[str, Any]:
    started = time.monotonic()
    referenced, kinds = _referenced(table)
    missing = sorted(p for p in referenced if not os.path.exists(p))
    listed = set()
    for path in glob.glob(os.path.join(cfg["run_dir"], "orphan-lists", "*.txt")):
        with open(path) as f:
            listed.update(line.strip().removeprefix("file://") for line in f if line.strip())
    wrongly_deleted = sorted(p for p in listed & referenced if not os.path.exists(p))
    live_files = list(table.scan().plan_files())
    return {
        "files": {
            "live_data_files": len(live_files),
            "live_delete_files": sum(len(t.delete_files) for t in live_files),
            "on_disk": _files_on_disk(cfg["table_dir"]),
            "referenced": kinds,
        },
        "referenced_missing_count": len(missing),
        "referenced_missing": missing[:20],
        "orphan_candidates_seen": len(listed),
        "referenced_orphan_candidates_deleted": wrongly_deleted[:20],
        "planted_old_left": [p for p in cfg["planted_old"] if os.path.exists(p)],
        "file_check_seconds": round(time.monotonic() - started, 2),
    }


def _ok(result: dict[str, Any]) -> bool:
    model, tag_check = result["model"], result["model"]["tag_check"]
    return bool(
        result["match"]
        and not result.get("scan_error")
        and not result.get("table", {}).get("duplicate_ids")
        and not model["delete_count_mismatches"]
        and not model["duplicate_tags"]
        and not tag_check["committed_not_in_table"]
        and not tag_check["in_table_not_logged_committed"]
        and not result["referenced_missing_count"]
        and not result["referenced_orphan_candidates_deleted"]
    )


def maintain(cfg: dict[str, Any]) -> dict[str, Any]:
    """With the actors stopped: one more compaction, then orphan removal of everything unreferenced."""
    from airflow_provider_iceberg_exec.engine.ops.compaction import compact
    from airflow_provider_iceberg_exec.engine.ops.orphans import remove_orphan_files

    table = _catalog(cfg).load_table(TABLE)
    limits = _limits(cfg, "final")
    out: dict[str, Any] = {}
    started = time.monotonic()
    done = compact(table, options={"min-input-files": "2"}, limits=limits, commit_id="soak-final-compact")
    out["compact"] = {
        k: done[k] for k in ("rewritten_data_files_count", "added_data_files_count", "snapshot_ids")
    }
    out["compact_seconds"] = round(time.monotonic() - started, 2)
    started = time.monotonic()
    removed = remove_orphan_files(
        table,
        older_than="0s",
        force=True,
        limits=limits,
        orphan_list_uri=os.path.join(cfg["run_dir"], "orphan-lists", "final.txt"),
    )
    out["orphans"] = {
        "found": removed["orphan_file_count"],
        **{
            k: removed["delete"][k]
            for k in ("deleted_file_count", "skipped_referenced_count", "failed_file_count")
        },
    }
    out["orphans_seconds"] = round(time.monotonic() - started, 2)
    return out


# ------------------------------------------------------------------------------------- orchestration


def _engine_digest(root: str) -> str:
    digest = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(root, "airflow_provider_iceberg_exec", "engine", "*.py"))):
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:12]


def _git_head() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            ["git", "-C", REPO, "status", "--porcelain", "--", "airflow_provider_iceberg_exec"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + (" + uncommitted engine changes" if dirty.stdout.strip() else "")


def _spawn(
    cfg: dict[str, Any], role: str, name: str, index: int = 0, phase: str = ""
) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", role, "--config", cfg["config_path"]]
    cmd += ["--index", str(index), "--name", name, "--phase", phase]
    root = cfg["code_root"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    with open(os.path.join(cfg["run_dir"], "logs", f"{name}.log"), "ab") as log:
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _reap(
    procs: dict[str, subprocess.Popen[bytes]], deadline: float, loads: list[list[float]]
) -> dict[str, dict[str, Any]]:
    """Wait for every child (sampling the load average); stop, by its pid, any that outlives ``deadline``."""
    usage: dict[str, dict[str, Any]] = {}
    next_sample = 0.0
    while len(usage) < len(procs):
        now = time.time()
        if now >= next_sample:
            loads.append([round(now, 1), *(round(x, 2) for x in os.getloadavg())])
            next_sample = now + 5
        for name, proc in procs.items():
            if name in usage:
                continue
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                usage[name] = {
                    "exit_code": os.waitstatus_to_exitcode(status),
                    "peak_rss_bytes": ru.ru_maxrss * 1024,
                    "cpu_seconds": round(ru.ru_utime + ru.ru_stime, 2),
                    "ended": round(now, 2),
                }
            elif now > deadline:
                _log(f"{name} (pid {proc.pid}) is still running past the deadline: SIGTERM")
                proc.terminate()
        time.sleep(0.2)
    return usage


def _run_one(cfg: dict[str, Any], role: str, name: str, phase: str = "") -> dict[str, Any]:
    proc = _spawn(cfg, role, name, phase=phase)
    usage = _reap({name: proc}, time.time() + 1800, [])[name]
    result_path = os.path.join(cfg["run_dir"], "results", f"{name}.json")
    if usage["exit_code"] != 0 or not os.path.exists(result_path):
        return {"failed": f"exit code {usage['exit_code']}; see {cfg['run_dir']}/logs/{name}.log", **usage}
    with open(result_path) as f:
        return {**json.load(f), **usage}


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _actors(cfg: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [("writer", f"writer-{i}", i) for i in range(cfg["writers"])] + [
        ("deleter", "deleter", 0),
        ("compactor", "compactor", 0),
        ("orphans", "orphans", 0),
    ]


def _soak(cfg: dict[str, Any], report: dict[str, Any]) -> None:
    setup_result = _run_one(cfg, "setup", "setup")
    if "failed" in setup_result:
        raise SystemExit(f"set-up failed: {setup_result['failed']}")
    cfg.update(table_dir=setup_result["table_dir"], planted_old=setup_result["planted_old"])
    with open(cfg["config_path"], "w") as f:
        json.dump(cfg, f, indent=2)
    procs = {name: _spawn(cfg, role, name, index) for role, name, index in _actors(cfg)}
    waited = time.monotonic()
    while len(os.listdir(os.path.join(cfg["run_dir"], "ready"))) < len(procs):
        if time.monotonic() - waited > 300 or any(p.poll() is not None for p in procs.values()):
            for p in procs.values():
                p.terminate()
            raise SystemExit(f"the actors did not all get ready; see {cfg['run_dir']}/logs")
        time.sleep(0.1)
    start = time.time() + 1.0
    until = start + cfg["seconds"]
    go = os.path.join(cfg["run_dir"], "go.json")
    with open(go + ".tmp", "w") as f:
        json.dump({"start": start, "until": until}, f)
    os.replace(go + ".tmp", go)  # the actors poll for it: never let them read half of it
    _log(f"{len(procs)} actors ready after {time.monotonic() - waited:.1f} s; soaking {cfg['seconds']} s ...")
    loads: list[list[float]] = []
    usage = _reap(procs, until + GRACE_SECONDS + 120, loads)
    report["soak"] = {
        "start": start,
        "until": until,
        "last_actor_ended_after": round(max(u["ended"] for u in usage.values()) - start, 1),
    }
    report["load_average"] = {"samples": loads, **_load_summary(loads)}
    for _role, name, _index in _actors(cfg):
        path = os.path.join(cfg["run_dir"], "results", f"{name}.json")
        result = {"failed": f"no result; see logs/{name}.log"}
        if os.path.exists(path):
            with open(path) as f:
                result = json.load(f)
        report["actors"][name] = {**result, **usage[name]}
    _log("checking the table (before the final maintenance) ...")
    report["check_before"] = _run_one(cfg, "check", "check-before", phase="before")
    _log("final compaction and orphan removal, then checking again ...")
    report["final_maintenance"] = _run_one(cfg, "maintain", "maintain")
    report["check_after"] = _run_one(cfg, "check", "check-after", phase="after")


def _load_summary(loads: list[list[float]]) -> dict[str, Any]:
    ones = [s[1] for s in loads]
    if not ones:
        return {}
    return {
        "min_1m": min(ones),
        "max_1m": max(ones),
        "mean_1m": round(sum(ones) / len(ones), 2),
        "last": loads[-1][1:],
    }


def orchestrate(args: argparse.Namespace) -> int:
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from tests.integration.services import start_postgres

    out = os.path.abspath(args.out)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = os.path.join(out, "runs", stamp)
    for sub in ("logs", "results", "ready", "orphan-lists", "spill"):
        os.makedirs(os.path.join(run_dir, sub))
    code_root = REPO
    if not args.no_snapshot:
        code_root = os.path.join(out, "code", stamp)
        shutil.copytree(
            os.path.join(REPO, "airflow_provider_iceberg_exec"),
            os.path.join(code_root, "airflow_provider_iceberg_exec"),
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "engine": {"commit": _git_head(), "sha256": _engine_digest(code_root), "code_root": code_root},
        "run_dir": run_dir,
        "actors": {},
    }
    _log(f"starting PostgreSQL; run directory {run_dir}")
    with start_postgres() as pg:
        database = pg.create_database("soak")
        cfg = {
            "uri": pg.url(database),
            "warehouse": f"file://{run_dir}/warehouse",
            "run_dir": run_dir,
            "config_path": os.path.join(run_dir, "config.json"),
            "code_root": code_root,
            "seconds": args.seconds,
            "writers": args.writers,
            "min_rows": args.min_rows,
            "max_rows": args.max_rows,
            "older_than": args.older_than,
            "writer_pause": args.writer_pause,
            "delete_pause": args.delete_pause,
            "compact_pause": args.compact_pause,
            "orphan_pause": args.orphan_pause,
            "memory_limit_mib": args.memory_limit,
            "seed": args.seed,
            "inject": args.inject,
            "commit_timeout": args.commit_timeout,
        }
        with open(cfg["config_path"], "w") as f:
            json.dump(cfg, f, indent=2)
        report["settings"] = {k: v for k, v in cfg.items() if k not in ("uri", "config_path")}
        report["settings"]["table_properties"] = TABLE_PROPERTIES
        report["postgres"] = {"version_dir": str(pg.data_dir), "database": database}
        _soak(cfg, report)
    report["ok"] = _verdict(report)
    path = os.path.join(out, f"soak-results-{stamp}.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render(report))
        print(f"\nresults: {path}")
    if report["ok"] and not args.keep:
        shutil.rmtree(os.path.join(run_dir, "warehouse"), ignore_errors=True)
        shutil.rmtree(os.path.join(run_dir, "spill"), ignore_errors=True)
    return 0 if report["ok"] else 1


def _verdict(report: dict[str, Any]) -> bool:
    checks = [report.get("check_before", {}), report.get("check_after", {})]
    actors = report["actors"].values()
    return bool(
        all(c.get("ok") for c in checks)
        and "failed" not in report.get("final_maintenance", {"failed": True})
        and all(not a.get("unexpected") and "failed" not in a and not _alerts(a) for a in actors)
        and not any(c.get("planted_old_left") for c in checks)
    )


def _alerts(actor: dict[str, Any]) -> int:
    return sum(v for k, v in actor.get("counts", {}).items() if k.startswith("ALERT"))


def _fmt(counter: dict[str, int]) -> str:
    return ", ".join(f"{k.rsplit('.', 1)[-1]} {v}" for k, v in sorted(counter.items())) or "0"


def render(report: dict[str, Any]) -> str:
    engine = report["engine"]
    lines = [
        f"soak of {report['settings']['seconds']} s on {report['machine']['cpus']} CPUs, engine "
        f"{engine['commit']} ({engine['sha256']}), {report['date']}",
        "",
        "| actor | ops | commits | no-op | conflicts | retries (ours / PyIceberg's) | gave up | failures "
        "| unexpected | max op / call (s) | peak RSS (MiB) | CPU (s) |",
        "| --- | ---: | ---: | ---: | --- | --- | ---: | --- | --- | ---: | ---: | ---: |",
    ]
    for name, a in report["actors"].items():
        c = a.get("counts", {})
        cells = [
            name,
            a.get("ops", "-"),
            c.get("commits", 0),
            c.get("noops", 0),
            _fmt(a.get("conflicts", {})),
            f"{c.get('retries', 0)} / {a.get('pyiceberg_retries', 0)}",
            c.get("gave_up", 0),
            _fmt({**a.get("failures", {}), **a.get("unknown", {})}),
            _fmt(a.get("unexpected", {})),
            f"{a.get('max_op_seconds', '-')} / {a.get('max_attempt_seconds', '-')}",
            f"{a.get('peak_rss_bytes', 0) / MiB:.0f}",
            a.get("cpu_seconds", "-"),
        ]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    lines += ["", *_render_checks(report)]
    return "\n".join(lines)


def _render_check(key: str, c: dict[str, Any]) -> list[str]:
    if "failed" in c or "model" not in c:
        return [f"{key}: FAILED {c.get('failed')}"]
    t, m, f = c.get("table", {}), c["model"], c["files"]
    verdict = "MATCH" if c["match"] else "MISMATCH"
    lines = [
        f"{key}: rows {t.get('rows')} (model {m['rows']} = {m['committed_rows']} committed - "
        f"{m['deleted_rows']} deleted), checksum {t.get('checksum')} vs model {m['checksum']}: {verdict}; "
        f"live data files {f['live_data_files']}, delete files {f['live_delete_files']}, "
        f"on disk {f['on_disk']}, snapshots {c['snapshots']}; referenced files missing "
        f"{c['referenced_missing_count']}; checks {'ok' if c['ok'] else 'FAILED'}"
    ]
    if not c["ok"]:
        table = c.get("table", {})
        details = {
            "scan_error": c.get("scan_error"),
            "missing_ids": table.get("missing_count"),
            "first_missing": table.get("missing", [])[:3],
            "extra_ids": table.get("extra_count"),
            "first_extra": table.get("extra", [])[:3],
            "duplicate_ids": table.get("duplicate_ids"),
            "delete_count_mismatches": m["delete_count_mismatches"][:5],
            "duplicate_tags": dict(list(m["duplicate_tags"].items())[:5]),
            "tag_check": m["tag_check"],
            "referenced_missing": c["referenced_missing"][:5],
            "referenced_orphan_candidates_deleted": c["referenced_orphan_candidates_deleted"][:5],
        }
        lines.append(f"  details: {json.dumps(details, default=str)}")
    return lines


def _render_checks(report: dict[str, Any]) -> list[str]:
    orphans = report["actors"].get("orphans", {})
    deleter = report["actors"].get("deleter", {})
    totals = orphans.get("orphan_totals", {})
    lines = [
        f"orphan runs: {orphans.get('counts', {}).get('commits', 0)}, "
        f"found {totals.get('orphans_found', 0)}, "
        f"deleted {totals.get('deleted_file_count', 0)}, kept as referenced since the scan "
        f"{totals.get('skipped_referenced_count', 0)}, kept as younger "
        f"{totals.get('skipped_younger_count', 0)}; planted young files {orphans.get('planted_young', 0)}, "
        f"deleted once old enough {orphans.get('planted_young_deleted', 0)}",
        f"deleter: rows deleted {deleter.get('counts', {}).get('deleted_rows', 0)} in "
        f"{deleter.get('deletes', 0)} deletes",
    ]
    for key in ("check_before", "check_after"):
        lines += _render_check(key, report.get(key, {}))
    final = report.get("final_maintenance", {})
    shown = {k: final[k] for k in ("compact", "orphans", "failed") if k in final}
    lines.append(f"final maintenance: {json.dumps(shown)}")
    load = report.get("load_average", {})
    lines.append(
        f"load average (1 min, sampled every 5 s): min {load.get('min_1m')}, mean {load.get('mean_1m')}, "
        f"max {load.get('max_1m')}; at the end {load.get('last')}"
    )
    for name, a in report["actors"].items():
        for sample in a.get("samples", []):
            if sample["kind"] in ("unexpected", "failure", "unknown", "alert", "warning"):
                message = str(sample.get("message", sample))[:600]
                lines.append(
                    f"!! {name}: {sample['kind']} {sample['type']} at {sample.get('at_seconds')} s: {message}"
                )
    lines.append(f"VERDICT: {'ok' if report['ok'] else 'FAILED'}")
    return lines


def child(args: argparse.Namespace) -> int:
    with open(args.config) as f:
        cfg = json.load(f)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"
    )
    logging.getLogger("airflow_provider_iceberg_exec").setLevel(logging.INFO)
    logging.getLogger("soak").setLevel(logging.INFO)
    if args.child == "setup":
        result = setup(cfg)
    elif args.child == "check":
        result = check(cfg, args.phase)
    elif args.child == "maintain":
        result = maintain(cfg)
    else:
        result = run_actor(cfg, args.child, args.index)
    with open(os.path.join(cfg["run_dir"], "results", f"{args.name}.json"), "w") as f:
        json.dump(result, f, indent=2, default=str)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=120, help="how long the actors run (default 120)")
    parser.add_argument("--writers", type=int, default=4, help="appending processes (default 4)")
    parser.add_argument("--min-rows", type=int, default=50, help="smallest batch (rows)")
    parser.add_argument("--max-rows", type=int, default=500, help="largest batch (rows)")
    parser.add_argument("--older-than", type=int, default=60, help="orphan age fence in seconds (default 60)")
    parser.add_argument(
        "--writer-pause", type=float, default=0.5, help="seconds between a writer's batches (default 0.5)"
    )
    parser.add_argument("--delete-pause", type=float, default=0.2, help="seconds between deletes")
    parser.add_argument(
        "--compact-pause", type=float, default=3.0, help="seconds between compactions (default 3)"
    )
    parser.add_argument("--orphan-pause", type=float, default=3.0, help="seconds between orphan runs")
    parser.add_argument(
        "--memory-limit", type=int, default=128, help="engine memory limit, MiB (default 128)"
    )
    parser.add_argument(
        "--commit-timeout",
        type=float,
        default=20,
        help="table property commit.retry.total-timeout-ms, in seconds (default 20, a third of the age "
        "fence; 0: PyIceberg's default of 30 minutes, with which a commit can outlive the fence)",
    )
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument(
        "--inject",
        choices=("none", "lost-batch", "phantom-delete"),
        default="none",
        help="log a wrong outcome on purpose (a committed batch as not committed, or a delete that never "
        "ran as committed) to see the checks fail",
    )
    parser.add_argument("--out", default=os.path.join(HERE, "out", "soak"), help="default bench/out/soak")
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    parser.add_argument("--keep", action="store_true", help="keep the warehouse even when every check passed")
    parser.add_argument("--no-snapshot", action="store_true", help="import the work tree's engine")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--name", help=argparse.SUPPRESS)
    parser.add_argument("--phase", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    return orchestrate(args)


if __name__ == "__main__":
    raise SystemExit(main())

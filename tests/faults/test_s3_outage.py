"""The S3 server (SeaweedFS) crashes in the middle of a compaction's rewrite and of its commit.

Each outage runs once per seam (a module fixture): the compaction runs in a spawned child process held at
a known point (tests/faults/workers.py), the test kills the server there (``SIGKILL``), lets the child run
into the outage, and starts the server again on the same data. The tests then check, with PyIceberg's own
reader, that the table is exactly as before and that a retry succeeds with every row kept, and how the
failure was reported.

Seams: ``rewrite-read`` (the second group opens its first input), ``rewrite-write`` (the second group
opens its output; the first group's output is already uploaded), ``commit-manifest`` (the commit opens
its first manifest), ``commit-metadata`` (manifests written, the catalog opens the new metadata file).
"""

from __future__ import annotations

import json
import multiprocessing
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_iceberg_exec.demo import make_fragmented_table
from airflow_provider_iceberg_exec.engine import errors
from airflow_provider_iceberg_exec.engine.commit.snapshots import landed_snapshots
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig, load_catalog
from airflow_provider_iceberg_exec.engine.ops.compaction import commit_compaction, compact
from tests.faults.services import RestartableSeaweedFS
from tests.faults.workers import compact_paused, rewrite_then_commit_paused
from tests.helpers import data_files, live_checksum, table_state
from tests.integration.workers import child_outcome, start_child

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
_OPTIONS = {"min-input-files": "2"}
_WAIT_SECONDS = 90.0
_REGIONS = 3  # make_fragmented_table partitions by region: three groups, three output files
_CHAINED = "During handling of the above exception, another exception occurred"


@dataclass
class Outage:
    """One compaction that ran into an S3 crash at ``seam``, and the table as it was before."""

    seam: str
    table: Any
    state: tuple[int | None, list[str]]
    checksum: tuple[int, int]
    commit_id: str
    error: tuple[str, str, str]  # (exception class name, message, traceback) in the child
    results_path: Path  # the rewrite results, saved before a commit seam
    spill_dir: Path


def _error_class(name: str) -> type[BaseException] | None:
    return getattr(errors, name, None) or {"OSError": OSError}.get(name)


@pytest.fixture(
    scope="module", params=["rewrite-read", "rewrite-write", "commit-manifest", "commit-metadata"]
)
def outage(
    request: pytest.FixtureRequest, s3_service: RestartableSeaweedFS, tmp_path_factory: pytest.TempPathFactory
) -> Outage:
    seam = str(request.param)
    workdir = tmp_path_factory.mktemp(f"s3-{seam}")
    s3_service.start()
    properties = {
        "type": "sql",
        "uri": f"sqlite:///{workdir}/catalog.db",  # the catalog stays up: only S3 goes down
        "warehouse": s3_service.server.warehouse(),
        **s3_service.server.properties(),
    }
    table = make_fragmented_table(
        load_catalog(CatalogConfig("faults", properties)), "ns.events", num_files=4, rows_per_file=300
    )
    outage = Outage(
        seam=seam,
        table=table,
        state=table_state(table),
        checksum=live_checksum(table),
        commit_id=f"faults-{uuid.uuid4().hex}",
        error=("", "", ""),
        results_path=workdir / "results.json",
        spill_dir=workdir / "spill",
    )
    common = (properties, "ns.events", _OPTIONS, str(outage.spill_dir), outage.commit_id)
    if seam.startswith("rewrite"):
        target, args = compact_paused, (*common, seam)
    else:
        target, args = rewrite_then_commit_paused, (*common, str(outage.results_path), seam)

    context = multiprocessing.get_context("spawn")
    reached, go = context.Event(), context.Event()
    child = start_child(target, *args, reached, go)
    try:
        if not reached.wait(_WAIT_SECONDS):
            raise AssertionError(f"the child never reached seam {seam}: {child_outcome(*child, timeout=5)}")
        s3_service.kill()
    finally:
        go.set()
    status, value = child_outcome(*child, timeout=_WAIT_SECONDS)
    s3_service.start()
    assert status == "error", f"the compaction succeeded although S3 was down at {seam}: {value}"
    outage.error = tuple(value)  # type: ignore[assignment]
    return outage


def test_s3_crash_leaves_the_table_unchanged_and_the_retry_compacts_once(outage: Outage) -> None:
    """Whatever the seam, the task fails, the table is as before, and a retry lands one compaction.

    Why: a rewrite is many object reads and uploads, a commit several uploads before the catalog swaps
    its pointer; an outage in between must fail the task, never make a partial rewrite or a half-written
    commit visible, and must not delete the rewrite's outputs before the commit could use them. The
    failure is an engine error or the storage's own I/O error (which Airflow retries). The retry is the
    one a task would make: ``compact()`` again with the same commit id after a rewrite failure, the
    commit of the same results with the same commit id after a commit failure.
    """
    name, _message, trace = outage.error
    raised = _error_class(name)
    assert raised is not None, trace
    assert issubclass(raised, (errors.IcebergExecError, OSError)), trace
    table = outage.table
    assert table_state(table) == outage.state
    assert live_checksum(table) == outage.checksum
    assert landed_snapshots(table.refresh().metadata, outage.commit_id) == []

    if outage.seam.startswith("rewrite"):
        result = compact(
            table,
            options=_OPTIONS,
            limits=ResourceLimits(memory_limit_bytes=64 * MiB, spill_dir=str(outage.spill_dir)),
            commit_id=outage.commit_id,
        )
    else:
        results = json.loads(outage.results_path.read_text())
        result = commit_compaction(table, results, commit_id=outage.commit_id)
    assert result["already_committed"] is False
    assert live_checksum(table) == outage.checksum
    assert len(data_files(table)) == _REGIONS < len(outage.state[1])
    landed = landed_snapshots(table.metadata, outage.commit_id)
    assert [s.snapshot_id for s in landed] == result["snapshot_ids"]
    assert len(landed) == 1
    assert table.current_snapshot().summary.operation.value == "replace"


def test_s3_crash_reports_the_outage_itself(outage: Outage) -> None:
    """The error the task reports is the outage it ran into, not one raised by its own cleanup.

    Why: after a failed group, ``compact()`` removes what the earlier groups wrote; that cleanup is
    best effort (a file left behind is an orphan, never a lost row), so with the storage unreachable it
    must log and let the original error through. Otherwise the task log blames a metadata read of the
    cleanup instead of the rewrite that failed. An input that cannot be opened is a DataFileReadError.
    """
    name, message, trace = outage.error
    assert _CHAINED not in trace, trace
    assert "\n" not in message.strip()
    if outage.seam == "rewrite-read":
        assert name == "DataFileReadError", trace

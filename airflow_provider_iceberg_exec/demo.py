"""The demo: a fragmented table in a local SQLite catalog, compacted, with a before/after report.

``python -m airflow_provider_iceberg_exec.demo [--workdir DIR]`` or ``iceberg-exec demo``. The same table
builder serves the tests' fixtures and the benchmarks.
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import hashlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

__all__ = ["demo_catalog_properties", "live_rows_checksum", "make_fragmented_table", "run_demo"]

DEMO_TABLE = "demo.events"


def demo_catalog_properties(workdir: str) -> dict[str, str]:
    """The embedded default catalog: SQLite file and a local warehouse under ``workdir``."""
    workdir = os.path.abspath(workdir)
    return {
        "type": "sql",
        "uri": f"sqlite:///{workdir}/catalog.db",
        "warehouse": f"file://{workdir}/warehouse",
    }


def _demo_batch(start: int, rows: int, seed: int) -> pa.Table:
    import pyarrow as pa

    base = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    ids = list(range(start, start + rows))
    digest = [
        int.from_bytes(hashlib.blake2b(f"{seed}:{i}".encode(), digest_size=8).digest(), "little") for i in ids
    ]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "user_id": pa.array([d % 100_000 for d in digest], pa.int64()),
            "region": pa.array([("eu", "us", "apac")[d % 3] for d in digest], pa.string()),
            "amount": pa.array([decimal.Decimal(d % 1_000_000) / 100 for d in digest], pa.decimal128(12, 2)),
            "score": pa.array([(d % 10_000) / 7.0 if d % 50 else None for d in digest], pa.float64()),
            "event_ts": pa.array(
                [base + datetime.timedelta(seconds=d % (86400 * 7)) for d in digest],
                pa.timestamp("us", "UTC"),
            ),
            "payload": pa.array([f"event-{d:x}" for d in digest], pa.string()),
        }
    )


def make_fragmented_table(
    catalog: Catalog,
    identifier: str,
    *,
    num_files: int,
    rows_per_file: int,
    partitioned: bool = True,
    seed: int = 0,
) -> Table:
    """Create ``identifier`` and append ``num_files`` small appends to it, one commit each.

    Partitioned tables are partitioned by ``region`` (identity), so each append writes one file per region.
    """
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    namespace = identifier.rsplit(".", 1)[0]
    catalog.create_namespace_if_not_exists(namespace)
    schema = _demo_batch(0, 1, seed).schema
    table = catalog.create_table(identifier, schema=schema)
    if partitioned:
        with table.update_spec() as update:
            update.add_identity("region")
    del PartitionField, PartitionSpec, IdentityTransform
    for number in range(num_files):
        table.append(_demo_batch(number * rows_per_file, rows_per_file, seed))
    return table


def live_rows_checksum(table: Table) -> tuple[int, str]:
    """``(rows, checksum)``: an order-independent digest of every live row, read by PyIceberg's scan."""
    total, count = 0, 0
    for batch in table.scan().to_arrow_batch_reader():
        for row in batch.to_pylist():
            text = repr(sorted((k, repr(v)) for k, v in row.items()))
            total = (
                total + int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            ) & ((1 << 64) - 1)
            count += 1
    return count, f"{total:016x}"


def _table_report(table: Table) -> dict[str, Any]:
    table.refresh()
    files = [task.file for task in table.scan().plan_files()]
    snapshot = table.current_snapshot()
    rows, checksum = live_rows_checksum(table)
    return {
        "snapshot_id": snapshot.snapshot_id if snapshot else None,
        "operation": snapshot.summary.operation.value if snapshot and snapshot.summary else None,
        "data_files": len(files),
        "total_bytes": sum(f.file_size_in_bytes for f in files),
        "rows": rows,
        "checksum": checksum,
    }


def run_demo(workdir: str, *, memory_limit: str = "256MiB", out: Any = None) -> dict[str, Any]:
    """Build the fragmented demo table, compact it, and print the before/after report."""
    from airflow_provider_iceberg_exec.engine.catalog import CatalogConfig, load_catalog
    from airflow_provider_iceberg_exec.engine.compaction import compact
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits, parse_byte_size

    out = out or sys.stdout
    os.makedirs(workdir, exist_ok=True)
    catalog = load_catalog(CatalogConfig("demo", demo_catalog_properties(workdir)))
    if catalog.table_exists(DEMO_TABLE):
        catalog.purge_table(DEMO_TABLE)
    table = make_fragmented_table(catalog, DEMO_TABLE, num_files=30, rows_per_file=2_000)
    before = _table_report(table)
    limits = ResourceLimits(
        memory_limit_bytes=parse_byte_size(memory_limit),
        spill_dir=os.path.join(os.path.abspath(workdir), "spill"),
    )
    result = compact(
        table, options={"target-file-size-bytes": str(1 << 20), "min-input-files": "2"}, limits=limits
    )
    after = _table_report(table)
    lines = [
        f"table {DEMO_TABLE} in {os.path.abspath(workdir)}",
        f"{'':14}{'before':>22}{'after':>22}",
        *(f"{key:14}{before[key]!s:>22}{after[key]!s:>22}" for key in before),
        f"rewritten {result['rewritten_data_files_count']} files into {result['added_data_files_count']} "
        f"(peak RSS {result['peak_rss_bytes'] >> 20} MiB)",
        "row checksum unchanged"
        if (before["rows"], before["checksum"]) == (after["rows"], after["checksum"])
        else "ROW CHECKSUM CHANGED",
    ]
    print("\n".join(lines), file=out)
    if (before["rows"], before["checksum"]) != (after["rows"], after["checksum"]):
        raise SystemExit(1)
    return {"before": before, "after": after, "result": result}


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry of the demo."""
    parser = argparse.ArgumentParser(prog="iceberg-exec demo", description=__doc__)
    parser.add_argument("--workdir", default="demo-warehouse", help="where the catalog and warehouse go")
    parser.add_argument("--memory-limit", default="256MiB")
    args = parser.parse_args(argv)
    run_demo(args.workdir, memory_limit=args.memory_limit)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

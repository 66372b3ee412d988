"""``iceberg-exec``: every operation outside Airflow, with the same JSON documents the tasks exchange.

Catalogs are configured the PyIceberg way: ``--catalog NAME`` is read from ``~/.pyiceberg.yaml`` or from
``PYICEBERG_CATALOG__NAME__*`` environment variables. Exit codes: 0 success, 2 bad input (nothing was
changed), 1 any other failure.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import IO

from airflow_provider_iceberg_exec import __version__
from airflow_provider_iceberg_exec.cli import compaction, cow, deletes, maintenance, merge

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="iceberg-exec", description="Bounded-memory Iceberg table maintenance."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--catalog", default="default", help="PyIceberg catalog name (default: %(default)s)")
    parser.add_argument("--debug", action="store_true", help="print the traceback of an unexpected error")
    commands = parser.add_subparsers(dest="command", required=True)

    # In the order of the help text.
    compaction.add_commands(commands)
    maintenance.add_commands(commands)
    cow.add_commands(commands)
    deletes.add_commands(commands)
    merge.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None, out: IO[str] | None = None) -> int:
    """Run ``iceberg-exec``; returns the exit code."""
    import logging

    from airflow_provider_iceberg_exec.cli.progress import progress_display
    from airflow_provider_iceberg_exec.engine.errors import (
        CatalogUnavailableError,
        ConfigurationError,
        DataFileCodecError,
        IcebergExecError,
    )

    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    out = out or sys.stdout
    try:
        with progress_display(args, out):
            args.run(args, out)
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

"""What every command shares: the catalog and table of the arguments, limits, options, JSON in and out."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Sequence
from typing import IO, Any

__all__ = [
    "add_limits",
    "catalog_named",
    "emit",
    "limits_of",
    "options_of",
    "pairs_of",
    "read_json",
    "table_of",
]


def add_limits(p: argparse.ArgumentParser) -> None:
    """The ``--memory-limit``, ``--spill-dir`` and ``--quiet`` arguments of a bounded (long) command."""
    p.add_argument(
        "--memory-limit", default="256MiB", help="memory limit, e.g. 256MiB (default: %(default)s)"
    )
    p.add_argument("--spill-dir", help="directory for spill and staging files (default: the temp dir)")
    p.add_argument(
        "--quiet", "-q", action="store_true", help="no progress display (there is none off a terminal)"
    )


def catalog_named(name: str) -> Any:
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


def table_of(args: argparse.Namespace) -> Any:
    from airflow_provider_iceberg_exec.engine.io.catalog import load_table

    return load_table(catalog_named(args.catalog), args.table)


def limits_of(args: argparse.Namespace) -> Any:
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits, parse_byte_size

    kwargs: dict[str, Any] = {"memory_limit_bytes": parse_byte_size(args.memory_limit)}
    if args.spill_dir:
        kwargs["spill_dir"] = args.spill_dir
    return ResourceLimits(**kwargs)


def options_of(pairs: Sequence[str]) -> dict[str, str]:
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigurationError(f"option {pair!r} is not key=value, e.g. --option min-input-files=2")
        options[key.strip()] = value.strip()
    return options


def read_json(path: str) -> Any:
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    try:
        with open(path) as f:
            return json.load(f)
    except OSError as err:
        raise ConfigurationError(f"cannot read {path}: {err.strerror}") from err
    except json.JSONDecodeError as err:
        raise ConfigurationError(f"{path} is not JSON: {err}") from err


def emit(doc: Any, args: argparse.Namespace, out: IO[str]) -> None:
    """Write ``doc`` as indented JSON to ``--output`` or ``out``, streamed: the plan of a table of 500,000
    files is hundreds of MB of text, never built as one string. A failed ``--output`` file is removed."""
    output = getattr(args, "output", None)
    if not output:
        json.dump(doc, out, indent=2, sort_keys=True)
        out.write("\n")
        return
    try:
        with open(output, "w") as f:
            json.dump(doc, f, indent=2, sort_keys=True)
            f.write("\n")
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(output)
        raise


def pairs_of(pairs: Sequence[str], what: str) -> dict[str, str]:
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    mapping = {}
    for pair in pairs:
        keys, sep, value = pair.partition("=")
        if not sep or not keys.strip():
            raise ConfigurationError(f"{what} {pair!r} is not NAMES=NAME, e.g. s3a,s3n=s3")
        mapping[keys.strip()] = value.strip()
    return mapping

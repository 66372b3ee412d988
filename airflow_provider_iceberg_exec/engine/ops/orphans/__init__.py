"""Orphan files: find the files under a table's location that no metadata references, then delete them.

Spark's ``remove_orphan_files`` split in two steps that exchange a small JSON document, so that millions
of paths never pass through an Airflow XCom:

``scan_orphan_files`` -> the orphan list (one path per line) in a staging location and a result document
(``iceberg-exec/orphan-scan-result@1``) -> ``delete_orphan_files`` -> ``iceberg-exec/orphan-delete-result@1``.

:func:`remove_orphan_files` runs both, like the Spark procedure (``dry_run`` scans only).

The modules, by concern:

- :mod:`.rules`: what both steps apply (``gc.enabled``, the age floor, ``prefix_mismatch_mode``);
- :mod:`.listing`: listing the storage into a staged file, and the checks that the listing and the
  reference set are complete;
- :mod:`.joins`: the anti-joins of the listing and the references in DataFusion;
- :mod:`.scan`: the scan, from the refusals to the orphan list and its result document;
- :mod:`.delete`: the delete, with its re-proofs against the metadata of the moment;
- :mod:`.documents`: the orphan list and the result documents' files.
"""

from __future__ import annotations

from airflow_provider_iceberg_exec.engine.ops.orphans.delete import delete_orphan_files, remove_orphan_files
from airflow_provider_iceberg_exec.engine.ops.orphans.documents import (
    read_orphan_scan_result,
    resolve_orphan_scan_result,
    staged_list_uri,
)
from airflow_provider_iceberg_exec.engine.ops.orphans.rules import DEFAULT_ORPHAN_AGE, PrefixMismatchMode
from airflow_provider_iceberg_exec.engine.ops.orphans.scan import scan_orphan_files

__all__ = [
    "DEFAULT_ORPHAN_AGE",
    "PrefixMismatchMode",
    "delete_orphan_files",
    "read_orphan_scan_result",
    "remove_orphan_files",
    "resolve_orphan_scan_result",
    "scan_orphan_files",
    "staged_list_uri",
]

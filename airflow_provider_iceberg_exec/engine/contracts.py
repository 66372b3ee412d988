"""The JSON documents the steps exchange, each in a versioned envelope.

Every document carries ``"schema": "iceberg-exec/<kind>@<version>"``; bump the version when its shape
changes. Data files inside are Iceberg REST ``ContentFile`` JSON (:mod:`.datafile_json`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError

__all__ = [
    "COMPACTION_PLAN",
    "COMPACTION_RESULT",
    "COW_COMMIT_RESULT",
    "COW_PLAN",
    "COW_RESULT",
    "COW_TASK",
    "EXPIRE_SNAPSHOTS_RESULT",
    "ORPHAN_DELETE_RESULT",
    "ORPHAN_SCAN_RESULT",
    "REWRITE_RESULT",
    "REWRITE_TASK",
    "check_envelope",
    "envelope",
]

COMPACTION_PLAN = "iceberg-exec/compaction-plan@1"
REWRITE_TASK = "iceberg-exec/rewrite-task@1"
REWRITE_RESULT = "iceberg-exec/rewrite-result@1"
COMPACTION_RESULT = "iceberg-exec/compaction-result@1"

#: copy-on-write delete / update / overwrite by predicate (:mod:`.cow`): plan -> task -> result -> commit
COW_PLAN = "iceberg-exec/cow-plan@1"
COW_TASK = "iceberg-exec/cow-task@1"
COW_RESULT = "iceberg-exec/cow-result@1"
COW_COMMIT_RESULT = "iceberg-exec/cow-commit-result@1"

#: orphan files (:mod:`.orphans`): scan -> result (+ the orphan list file) -> delete -> result
ORPHAN_SCAN_RESULT = "iceberg-exec/orphan-scan-result@1"
ORPHAN_DELETE_RESULT = "iceberg-exec/orphan-delete-result@1"
#: snapshot expiry with file cleanup (:mod:`.expire`)
EXPIRE_SNAPSHOTS_RESULT = "iceberg-exec/expire-snapshots-result@1"


def envelope(schema: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """Wrap ``body`` in the envelope of ``schema``.

    >>> envelope(REWRITE_TASK, {"group_id": "g"})["schema"]
    'iceberg-exec/rewrite-task@1'
    """
    return {"schema": schema, **body}


def check_envelope(doc: Any, schema: str) -> Mapping[str, Any]:
    """Return ``doc`` if it is a document of ``schema``.

    :raises DataFileCodecError: when it is not a JSON object, or of another kind or version.

    >>> check_envelope({"schema": "iceberg-exec/rewrite-task@2"}, REWRITE_TASK)
    Traceback (most recent call last):
    ...
    airflow_provider_iceberg_exec.engine.errors.DataFileCodecError: expected a iceberg-exec/rewrite-task@1 document, got schema 'iceberg-exec/rewrite-task@2'
    """  # noqa: E501
    if not isinstance(doc, Mapping):
        raise DataFileCodecError(f"expected a {schema} document (a JSON object), got {type(doc).__name__}")
    found = doc.get("schema")
    if found != schema:
        raise DataFileCodecError(f"expected a {schema} document, got schema {found!r}")
    return doc

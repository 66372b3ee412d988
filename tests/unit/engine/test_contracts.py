"""engine/contracts.py: every document kind is versioned, and the envelope is checked first."""

from __future__ import annotations

import pytest

from airflow_provider_iceberg_exec.engine import contracts
from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError


def test_every_document_schema_is_versioned_and_distinct() -> None:
    schemas = [getattr(contracts, name) for name in contracts.__all__ if name.isupper()]
    assert len(set(schemas)) == len(schemas)
    assert all(s.startswith("iceberg-exec/") and s.rsplit("@", 1)[1].isdigit() for s in schemas)


def test_an_envelope_round_trips_and_another_kind_or_version_is_refused() -> None:
    doc = contracts.envelope(contracts.REWRITE_TASK, {"group_id": "1"})
    assert contracts.check_envelope(doc, contracts.REWRITE_TASK) is doc
    with pytest.raises(DataFileCodecError, match="got schema 'iceberg-exec/rewrite-task@1'"):
        contracts.check_envelope(doc, contracts.REWRITE_RESULT)
    with pytest.raises(DataFileCodecError, match="got schema None"):
        contracts.check_envelope({}, contracts.REWRITE_TASK)
    with pytest.raises(DataFileCodecError, match=r"\(a JSON object\), got str"):
        contracts.check_envelope("{}", contracts.REWRITE_TASK)

"""docs/connections.md lists exactly the catalog properties the engine accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.io.catalog import ALLOWED_PROPERTY_PATTERNS, CatalogConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "connections.md"


def _documented_patterns() -> list[str]:
    text = DOC.read_text()
    block = re.search(r"```text\n(.*?)\n```", text, re.DOTALL)
    assert block, "docs/connections.md has no ```text block of accepted properties"
    return block.group(1).splitlines()


def test_the_documented_allowlist_is_the_engines() -> None:
    assert _documented_patterns() == list(ALLOWED_PROPERTY_PATTERNS)


def test_the_documented_examples_hold() -> None:
    CatalogConfig("c", {"type": "rest", "s3.endpoint": "http://127.0.0.1:2"})
    for refused in ("s3.sse.type", "s3.proxy-uri"):
        with pytest.raises(ConfigurationError, match=re.escape(refused)):
            CatalogConfig("c", {"type": "rest", refused: "x"})

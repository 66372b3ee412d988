"""``iceberg-exec`` writes its documents streamed (a 500,000-file plan is never one string), byte for byte
the text it wrote before, and leaves no half-written ``--output`` file behind."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from airflow_provider_iceberg_exec.cli.common import emit

DOC = {"schema": "iceberg-exec/compaction-plan@1", "tasks": [{"b": 1, "a": [1, 2.5, None, "x"]}], "z": {}}


def test_emits_the_indented_sorted_text_to_the_stream() -> None:
    out = io.StringIO()

    emit(DOC, argparse.Namespace(output=None), out)

    assert out.getvalue() == json.dumps(DOC, indent=2, sort_keys=True) + "\n"


def test_emits_the_same_text_to_the_output_file(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    out = io.StringIO()

    emit(DOC, argparse.Namespace(output=str(path)), out)

    assert path.read_text() == json.dumps(DOC, indent=2, sort_keys=True) + "\n"
    assert out.getvalue() == ""


def test_a_document_that_fails_to_encode_leaves_no_output_file(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    bad = {"tasks": [{"ok": 1}, {"bad": object()}]}

    with pytest.raises(TypeError):
        emit(bad, argparse.Namespace(output=str(path)), io.StringIO())

    assert not path.exists()

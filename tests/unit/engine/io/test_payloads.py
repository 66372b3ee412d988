"""engine/io/payloads.py: large payloads are staged as JSON files under the table; references resolve back.

Pure engine code (no Airflow): a PyArrow FileIO on a temporary directory.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, DataFileCodecError
from airflow_provider_iceberg_exec.engine.io.payloads import (
    PAYLOAD_REF_SCHEMA,
    count_files,
    is_payload_ref,
    offload_payload,
    resolve_payload,
    staging_uri,
)


@pytest.fixture
def io():
    from pyiceberg.io.pyarrow import PyArrowFileIO

    return PyArrowFileIO()


def _data_file(i: int) -> dict:
    """A synthetic REST content-file JSON document."""
    return {
        "spec-id": 0,
        "content": "data",
        "file-path": f"file:///warehouse/ns/t/data/part-{i:05d}.parquet",
        "file-format": "parquet",
        "partition": [],
        "file-size-in-bytes": 1000 + i,
        "record-count": 10,
        "column-sizes": {"keys": [1, 2], "values": [100, 200]},
    }


def _result(n: int) -> dict:
    return {
        "schema": "iceberg-exec/rewrite-result@1",
        "table": "ns.t",
        "group_id": 7,
        "commit_batch": 0,
        "base_snapshot_id": 42,
        "branch": "main",
        "rewritten_data_files": [_data_file(i) for i in range(n)],
        "added_data_files": [_data_file(100_000 + i) for i in range(max(1, n // 10))],
        "removed_delete_files": [],
    }


def test_small_payload_stays_inline(io, tmp_path):
    doc = _result(3)
    assert offload_payload(io, str(tmp_path), doc, name="x", threshold=10) == doc
    assert not (tmp_path / "metadata").exists()


def test_large_payload_is_staged_and_resolves_back(io, tmp_path):
    doc = _result(50)
    ref = offload_payload(io, f"file://{tmp_path}", doc, name="dag__run__rewrite__3__result", threshold=10)
    assert is_payload_ref(ref)
    assert ref["uri"] == f"file://{tmp_path}/metadata/iceberg-exec-staging/dag__run__rewrite__3__result.json"
    assert ref["inner_schema"] == "iceberg-exec/rewrite-result@1"
    assert ref["file_count"] == 55
    assert (ref["table"], ref["group_id"], ref["base_snapshot_id"]) == ("ns.t", 7, 42)
    assert resolve_payload(io, ref) == doc


def test_resolve_passes_other_documents_through(io):
    doc = {"schema": "iceberg-exec/rewrite-task@1", "data_files": []}
    assert resolve_payload(io, doc) == doc


def test_retry_overwrites_its_staged_file(io, tmp_path):
    first = offload_payload(io, str(tmp_path), _result(20), name="same", threshold=1)
    second = offload_payload(io, str(tmp_path), _result(30), name="same", threshold=1)
    assert first["uri"] == second["uri"]
    assert len(resolve_payload(io, second)["rewritten_data_files"]) == 30


def test_a_deleted_staged_file_no_longer_resolves(io, tmp_path):
    """Discarding is the table's safe delete (tests/integration/test_no_lost_files.py); once gone, a
    reference cannot be resolved."""
    ref = offload_payload(io, str(tmp_path), _result(5), name="gone", threshold=0)
    io.delete(ref["uri"])
    with pytest.raises(DataFileCodecError, match="cannot be read"):
        resolve_payload(io, ref)


def test_staged_file_of_another_schema_is_refused(io, tmp_path):
    ref = offload_payload(io, str(tmp_path), _result(5), name="r", threshold=0)
    with pytest.raises(DataFileCodecError, match="expected 'iceberg-exec/other@1'"):
        resolve_payload(io, {**ref, "inner_schema": "iceberg-exec/other@1"})


def test_corrupt_staged_file_is_a_codec_error(io, tmp_path):
    ref = offload_payload(io, str(tmp_path), _result(5), name="c", threshold=0)
    path = ref["uri"]
    with open(path, "w") as handle:
        handle.write("{not json")
    with pytest.raises(DataFileCodecError, match="not JSON"):
        resolve_payload(io, ref)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"threshold": -1}, ConfigurationError), ({"name": "///"}, ConfigurationError)],
)
def test_bad_arguments_are_refused(io, tmp_path, kwargs, error):
    args = {"name": "n", "threshold": 0, **kwargs}
    with pytest.raises(error):
        offload_payload(io, str(tmp_path), _result(2), **args)


def test_payload_without_schema_is_refused(io, tmp_path):
    with pytest.raises(DataFileCodecError, match="schema"):
        offload_payload(io, str(tmp_path), {"data_files": [{}]}, name="n", threshold=0)


def test_reference_without_uri_is_refused(io):
    with pytest.raises(DataFileCodecError, match="uri"):
        resolve_payload(io, {"schema": PAYLOAD_REF_SCHEMA})


def test_count_files_counts_every_file_list_of_every_envelope():
    plan_tasks = [{"data_files": [{}, {}]}, {"data_files": [{}], "delete_files": [{}]}]
    assert count_files(plan_tasks) == 4
    assert count_files(_result(10)) == 11
    assert count_files("text") == 0


def test_staging_uri_sanitises_run_ids():
    uri = staging_uri("s3://b/t", "dag__manual__2024-01-01T00:00:00+00:00__rewrite__0__result")
    assert (
        uri
        == "s3://b/t/metadata/iceberg-exec-staging/dag__manual__2024-01-01T00_00_00_00_00__rewrite__0__result.json"
    )


def test_reference_document_is_small_json(io, tmp_path):
    ref = offload_payload(io, str(tmp_path), _result(5000), name="big", threshold=1000)
    assert len(json.dumps(ref)) < 1000


def test_engine_payloads_module_does_not_import_airflow():
    code = (
        "import sys; sys.modules['airflow'] = None; import airflow_provider_iceberg_exec.engine.io.payloads"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_exactly_the_threshold_stays_inline_and_one_more_is_staged(io, tmp_path):
    doc = _result(10)  # 11 files
    assert offload_payload(io, str(tmp_path), doc, name="edge", threshold=11) == doc
    assert is_payload_ref(offload_payload(io, str(tmp_path), doc, name="edge", threshold=10))


def test_a_payload_that_is_not_strict_json_is_refused_before_anything_is_written(io, tmp_path):
    doc = {**_result(5), "ratio": float("nan")}
    with pytest.raises(DataFileCodecError, match="is not JSON-serializable"):
        offload_payload(io, str(tmp_path), doc, name="nan", threshold=0)
    assert not (tmp_path / "metadata").exists()


def test_staged_text_is_exactly_the_compact_json_of_the_document(io, tmp_path):
    """The payload is written streamed (walked, entries encoded one by one) but byte for byte as one
    ``json.dumps`` would write it, with shared lists, non-string keys, unicode and long lists."""
    shared: list[object] = []
    entries = [
        {
            "data-file": {"file-path": f"s3://b/é/{i}.parquet", "partition": shared, "n": i},
            "delete-files": shared,
        }
        for i in range(40)
    ]
    doc = {
        "schema": "iceberg-exec/compaction-plan@1",
        "tasks": [{"data_files": entries, "ids": {1: "a"}, "short": [1, 2]}, {"data_files": entries[:3]}],
        "ratio": 0.5,
    }
    ref = offload_payload(io, str(tmp_path), doc, name="exact", threshold=0)
    staged = (tmp_path / "metadata" / "iceberg-exec-staging" / "exact.json").read_bytes()
    assert staged == json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
    assert ref["size_bytes"] == len(staged)

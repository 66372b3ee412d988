"""The Airflow layer on an s3:// table: credentials from the connection reach the engine, nothing else.

The operator runs in-process (``execute``), its catalog and S3 credentials coming from an ``iceberg_exec``
connection in an ``AIRFLOW_CONN_*`` variable; its XCom value, its rendered template fields, the logs at
DEBUG and the error of a failing run are searched for the secrets.
"""

from __future__ import annotations

import json
import logging
import traceback
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_iceberg_exec.demo import make_fragmented_table
from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig, load_catalog
from tests.helpers import live_checksum
from tests.integration.services import SeaweedFS

pytestmark = pytest.mark.integration


def _connection(seaweedfs_server: SeaweedFS, tmp_path: Path, *, secret_key: str, warehouse: str) -> str:
    return json.dumps(
        {
            "conn_type": "iceberg_exec",
            "host": f"sqlite:///{tmp_path}/catalog.db",
            "schema": warehouse,
            "extra": {
                "catalog_type": "sql",
                "catalog_name": "airflow_s3",
                "s3_endpoint": seaweedfs_server.endpoint,
                "s3_region": seaweedfs_server.region,
                "s3_access_key_id": seaweedfs_server.access_key,
                "s3_secret_access_key": secret_key,
                "s3_path_style_access": True,
            },
        }
    )


def test_compaction_operator_on_s3_keeps_credentials_out_of_xcom_templates_logs_and_errors(
    seaweedfs_server: SeaweedFS,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from airflow_provider_iceberg_exec.operators.compaction import CompactionOperator

    warehouse = seaweedfs_server.warehouse()
    wrong_secret = "wrong-" + seaweedfs_server.secret_key
    secrets = {
        "s3 secret key": seaweedfs_server.secret_key,
        "s3 access key": seaweedfs_server.access_key,
        "wrong secret key": wrong_secret,
    }
    properties = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": warehouse}
    table = make_fragmented_table(
        load_catalog(CatalogConfig("airflow_s3", {**properties, **seaweedfs_server.properties()})),
        "ns.events",
        num_files=3,
        rows_per_file=200,
    )
    before = live_checksum(table)
    caplog.set_level(logging.DEBUG)
    context: dict[str, Any] = {"params": {"table": "ns.events"}}

    monkeypatch.setenv(
        "AIRFLOW_CONN_S3_LAKE",
        _connection(seaweedfs_server, tmp_path, secret_key=seaweedfs_server.secret_key, warehouse=warehouse),
    )
    operator = CompactionOperator(
        task_id="compact",
        table="{{ params.table }}",
        options={"min-input-files": "2"},
        memory_limit="64MiB",
        iceberg_exec_conn_id="s3_lake",
        commit_id="airflow-s3-1",
    )
    operator.render_template_fields(context)
    rendered = {name: getattr(operator, name) for name in operator.template_fields}
    assert rendered["table"] == "ns.events"
    xcom = operator.execute(context)
    assert xcom["added_data_files_count"] == 3
    assert live_checksum(table) == before

    monkeypatch.setenv(
        "AIRFLOW_CONN_S3_BAD",
        _connection(seaweedfs_server, tmp_path, secret_key=wrong_secret, warehouse=warehouse),
    )
    failing = CompactionOperator(
        task_id="compact_bad", table="ns.events", iceberg_exec_conn_id="s3_bad", commit_id="airflow-s3-2"
    )
    with pytest.raises(Exception) as refused:  # noqa: PT011 - whatever it is, it must not carry the secret
        failing.execute(context)
    assert "ACCESS_DENIED" in str(refused.value) or "denied" in str(refused.value).lower()

    captured = [record.getMessage() for record in caplog.records]
    captured += list(capfd.readouterr())
    captured += [json.dumps(xcom, default=str), json.dumps(rendered, default=str), repr(operator)]
    captured += ["".join(traceback.format_exception(refused.value))]
    text = "\n".join(captured)
    leaked = [name for name, value in secrets.items() if value in text]
    assert not leaked, f"{leaked} found in the XCom value, rendered templates, logs or the error"

"""IcebergExecHook: Connection -> CatalogConfig through an allowlist; secrets masked; test_connection."""

from __future__ import annotations

import json

import pytest

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.hooks.iceberg_exec import IcebergExecHook, catalog_config_from_connection
from tests.unit.support import connection_json

CONN_ENV = "AIRFLOW_CONN_ICEBERG_EXEC_DEFAULT"


def _set_conn(monkeypatch, **fields):
    monkeypatch.setenv(CONN_ENV, json.dumps({"conn_type": "iceberg_exec", **fields}))


def test_rest_connection_maps_fields_and_named_extras(monkeypatch):
    _set_conn(
        monkeypatch,
        host="https://catalog.example.com/api",
        port=8443,
        schema="s3://bucket/warehouse",
        login="client",
        password="very-secret-value",
        extra={
            "catalog_type": "rest",
            "catalog_name": "prod",
            "s3_endpoint": "http://minio:9000",
            "s3_access_key_id": "AKIAEXAMPLE",
            "s3_secret_access_key": "s3-secret-value",
            "s3_path_style_access": True,
            "gcs.project-id": "p1",
            "scope": "catalog",
            "s3_region": "",
        },
    )
    config = IcebergExecHook().catalog_config
    assert config.name == "prod"
    assert dict(config.properties) == {
        "type": "rest",
        "uri": "https://catalog.example.com:8443/api",
        "warehouse": "s3://bucket/warehouse",
        "credential": "client:very-secret-value",
        "s3.endpoint": "http://minio:9000",
        "s3.access-key-id": "AKIAEXAMPLE",
        "s3.secret-access-key": "s3-secret-value",
        "s3.path-style-access": "true",
        "gcs.project-id": "p1",
        "scope": "catalog",
    }


def test_password_alone_is_a_bearer_token(monkeypatch):
    _set_conn(monkeypatch, host="http://rest:8181", password="tok-123456")
    assert IcebergExecHook().catalog_config.properties["token"] == "tok-123456"


def test_sql_catalog_credentials_go_into_the_database_uri(monkeypatch):
    _set_conn(monkeypatch, host="postgresql+psycopg2://db:5432/iceberg", login="ice", password="p@ss word")
    props = IcebergExecHook().catalog_config.properties
    assert props["uri"] == "postgresql+psycopg2://ice:p%40ss%20word@db:5432/iceberg"
    assert "credential" not in props


def test_sqlite_absolute_path_uri_is_kept_verbatim(monkeypatch, tmp_path):
    monkeypatch.setenv(CONN_ENV, connection_json(tmp_path))
    hook = IcebergExecHook()
    assert hook.catalog_config.properties["uri"] == f"sqlite:///{tmp_path}/catalog.db"
    assert hook.catalog_name == "demo"


@pytest.mark.parametrize(
    "key", ["py-io-impl", "py-catalog-impl", "extra__iceberg_exec__py-io-impl", "anything"]
)
def test_extras_outside_the_allowlist_are_refused(monkeypatch, key):
    """Never pass extras through: ``py-*-impl`` would let a connection editor choose the code that runs."""
    _set_conn(monkeypatch, host="http://rest:8181", extra={key: "evil.Module"})
    with pytest.raises(ConfigurationError, match="not allowed"):
        IcebergExecHook().catalog_config  # noqa: B018


def test_legacy_prefixed_form_fields_are_understood(monkeypatch):
    _set_conn(monkeypatch, host="http://rest:8181", extra={"extra__iceberg_exec__s3_region": "eu-west-1"})
    assert IcebergExecHook().catalog_config.properties["s3.region"] == "eu-west-1"


def test_connection_name_defaults_to_conn_id(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_MY_CATALOG", json.dumps({"conn_type": "iceberg_exec", "host": "http://r"})
    )
    assert IcebergExecHook(iceberg_exec_conn_id="my_catalog").catalog_name == "my_catalog"


def test_secrets_are_registered_with_the_masker(monkeypatch):
    from airflow.sdk._shared.secrets_masker import redact

    _set_conn(
        monkeypatch,
        host="http://rest:8181",
        login="client",
        password="pw-0123456789",
        extra={"s3_secret_access_key": "s3-secret-0123456789"},
    )
    config = IcebergExecHook().catalog_config
    text = f"{config.properties['credential']} and s3-secret-0123456789 and pw-0123456789"
    redacted = redact(text)
    assert "pw-0123456789" not in redacted
    assert "s3-secret-0123456789" not in redacted
    assert "s3-secret-0123456789" not in repr(config)


def test_test_connection_reports_success_on_a_real_catalog(sqlite_table):
    ok, message = IcebergExecHook().test_connection()
    assert ok, message
    assert "demo" in message


def test_test_connection_reports_the_reason_and_never_raises(monkeypatch):
    _set_conn(monkeypatch, host="http://rest:8181", extra={"py-io-impl": "evil"})
    ok, message = IcebergExecHook().test_connection()
    assert not ok
    assert message.startswith("ConfigurationError:")
    assert "\n" not in message


def test_hook_loads_a_table(sqlite_table):
    assert IcebergExecHook().load_table("ns.events").name() == ("ns", "events")


def test_mapping_is_pure_and_needs_no_airflow_backend():
    from airflow.sdk import Connection

    conn = Connection(conn_id="c", conn_type="iceberg_exec", host="thrift://hms:9083", schema="s3://w")
    config = catalog_config_from_connection(conn)
    assert dict(config.properties) == {"uri": "thrift://hms:9083", "warehouse": "s3://w"}

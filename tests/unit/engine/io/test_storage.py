"""The one property mapping to PyIceberg's FileIO and DataFusion's object stores (no server needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from datafusion import object_store

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.io import storage
from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig, load_catalog
from airflow_provider_iceberg_exec.engine.io.session import build_session

S3 = {
    "s3.endpoint": "http://127.0.0.1:8333",
    "s3.access-key-id": "AKID",
    "s3.secret-access-key": "secret",
    "s3.session-token": "token",
    "s3.region": "eu-central-1",
    "s3.path-style-access": "true",
}


def _captured_kwargs(monkeypatch: pytest.MonkeyPatch, name: str) -> dict[str, Any]:
    """Replace ``object_store.<name>`` by a recorder of its keyword arguments."""
    seen: dict[str, Any] = {}

    def record(**kwargs: Any) -> str:
        seen.update(kwargs)
        return name

    monkeypatch.setattr(object_store, name, record)
    return seen


def test_s3_properties_map_to_every_amazon_s3_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _captured_kwargs(monkeypatch, "AmazonS3")
    assert storage.datafusion_object_store("s3://bucket/wh/t", S3) == "AmazonS3"
    assert seen == {
        "bucket_name": "bucket",
        "region": "eu-central-1",
        "access_key_id": "AKID",
        "secret_access_key": "secret",
        "session_token": "token",
        "endpoint": "http://127.0.0.1:8333",
        "allow_http": True,
    }


def test_client_properties_are_the_fallback_as_in_pyiceberg(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _captured_kwargs(monkeypatch, "AmazonS3")
    storage.datafusion_object_store(
        "s3a://b/k",
        {"client.region": "us-west-2", "client.access-key-id": "a", "client.secret-access-key": "s"},
    )
    assert (seen["region"], seen["access_key_id"], seen["secret_access_key"]) == ("us-west-2", "a", "s")
    assert "endpoint" not in seen


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({**S3, "s3.path-style-access": "false"}, "virtual-host addressing"),
        ({"s3.anonymous": "true"}, "s3.anonymous"),
        ({"s3.role-arn": "arn:aws:iam::1:role/r"}, "s3.role-arn"),
        ({"s3.access-key-id": "a"}, "both s3.access-key-id and s3.secret-access-key"),
        ({"s3.endpoint": "ftp://host"}, "http:// or https://"),
        ({"s3.path-style-access": "maybe"}, "must be true or false"),
    ],
)
def test_s3_properties_datafusion_cannot_honour_are_refused(properties: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        storage.datafusion_object_store("s3://bucket/x", properties)


def test_azure_account_key_sas_and_principal_map(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _captured_kwargs(monkeypatch, "MicrosoftAzure")
    storage.datafusion_object_store(
        "abfss://cont@acct.dfs.core.windows.net/wh",
        {
            "adls.account-key": "a2V5",
            "adls.sas-token": "?sv=2024&sig=abc%3D",
            "adls.client-id": "c",
            "adls.client-secret": "cs",
            "adls.tenant-id": "t",
        },
    )
    assert seen == {
        "container_name": "cont",
        "account": "acct",
        "access_key": "a2V5",
        "sas_query_pairs": [("sv", "2024"), ("sig", "abc=")],
        "client_id": "c",
        "client_secret": "cs",
        "tenant_id": "t",
    }


def test_azure_connection_string_and_emulator(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _captured_kwargs(monkeypatch, "MicrosoftAzure")
    storage.datafusion_object_store(
        "wasb://cont@devstoreaccount1.blob.core.windows.net/x",
        {
            "adls.connection-string": "UseDevelopmentStorage=true;DefaultEndpointsProtocol=http;"
            "AccountName=devstoreaccount1;AccountKey=Zm9vYmFy=="
        },
    )
    assert seen["account"] == "devstoreaccount1"
    assert seen["access_key"] == "Zm9vYmFy=="
    assert seen["use_emulator"] is True
    assert seen["allow_http"] is True


@pytest.mark.parametrize(
    ("location", "properties", "message"),
    [
        ("abfss://c@a.dfs.core.windows.net/x", {"adls.client-id": "c"}, "all of adls.client-id"),
        ("abfss://c@a.dfs.core.windows.net/x", {"adls.dfs-storage-authority": "h:1"}, "authority"),
        ("gs://bucket/x", {"gcs.oauth2.token": "ya29"}, "gcs.oauth2.token"),
        ("gs://bucket/x", {"gcs.service.host": "http://127.0.0.1:4443"}, "gcs.service.host"),
        ("hdfs://nn/wh", {}, "no object store for scheme 'hdfs'"),
        ("s3:///no-bucket", {}, "no bucket"),
    ],
)
def test_unmappable_locations_and_properties_are_refused(
    location: str, properties: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        storage.datafusion_object_store(location, properties)


def test_gcs_uses_default_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _captured_kwargs(monkeypatch, "GoogleCloud")
    storage.datafusion_object_store("gs://bucket/wh", {"gcs.project-id": "p"})
    assert seen == {"bucket_name": "bucket"}


def test_real_stores_are_built_offline() -> None:
    """The DataFusion constructors themselves accept the mapped arguments (no request is made)."""
    assert type(storage.datafusion_object_store("s3://b/x", S3)).__name__ == "AmazonS3"
    assert type(storage.datafusion_object_store("abfss://c@a.dfs.core.windows.net/x", {})).__name__ == (
        "MicrosoftAzure"
    )
    assert type(storage.datafusion_object_store("file:///tmp/x", {})).__name__ == "LocalFileSystem"


def test_register_object_store_skips_local_paths(tmp_path: Path) -> None:
    ctx = build_session(ResourceLimits(memory_limit_bytes=64 << 20, spill_dir=str(tmp_path)))
    storage.register_object_store(ctx, f"file://{tmp_path}", {})
    storage.register_object_store(ctx, "s3://bucket/wh", S3)


@pytest.mark.parametrize(
    ("given", "added"),
    [
        ({"s3.path-style-access": "true"}, {"s3.force-virtual-addressing": "false"}),
        ({"s3.path-style-access": "false"}, {"s3.force-virtual-addressing": "true"}),
        ({"s3.path-style-access": "true", "s3.force-virtual-addressing": "true"}, {}),
        ({"s3.endpoint": "http://h:1"}, {"s3.region": "us-east-1"}),
        ({"s3.endpoint": "http://h:1", "client.region": "eu-west-1"}, {}),
        ({"s3.region": "eu-west-1"}, {}),
    ],
)
def test_pyiceberg_properties_fill_what_pyiceberg_ignores(
    given: dict[str, str], added: dict[str, str]
) -> None:
    assert storage.pyiceberg_properties(given) == {**given, **added}


def test_load_catalog_gives_pyiceberg_the_mapped_properties(tmp_path: Path) -> None:
    catalog = load_catalog(
        CatalogConfig(
            "m",
            {
                "type": "sql",
                "uri": f"sqlite:///{tmp_path}/c.db",
                "warehouse": "s3://bucket/wh",
                "s3.endpoint": "http://127.0.0.1:1",
                "s3.path-style-access": "true",
            },
        )
    )
    assert catalog.properties["s3.force-virtual-addressing"] == "false"
    assert catalog.properties["s3.region"] == storage.DEFAULT_S3_REGION


def test_catalog_config_masks_a_database_password() -> None:
    config = CatalogConfig("c", {"uri": "postgresql+psycopg2://user:p%40ss@127.0.0.1:5432/db"})
    assert "p%40ss" not in repr(config)
    assert "user:***@127.0.0.1" in repr(config)
    assert config.secrets() == ["p%40ss", "p@ss"]

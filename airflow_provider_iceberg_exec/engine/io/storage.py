"""One mapping from catalog/FileIO properties to object stores: PyIceberg's FileIO and DataFusion's.

PyIceberg's ``PyArrowFileIO`` reads and writes every table file (data, manifests, metadata); where
DataFusion reads or writes remote paths it must reach the same bucket with the same credentials. Both
are derived here from the same allowlisted properties (:mod:`.catalog`):

=============================  ==============================  ===========================================
property                       PyIceberg FileIO (PyArrow)      DataFusion ``object_store``
=============================  ==============================  ===========================================
``s3.endpoint``                ``S3FileSystem(endpoint_...)``  ``AmazonS3(endpoint=, allow_http=)``
``s3.access-key-id``           ``access_key``                  ``access_key_id``
``s3.secret-access-key``       ``secret_key``                  ``secret_access_key``
``s3.session-token``           ``session_token``               ``session_token``
``s3.region``                  ``region``                      ``region``
``s3.path-style-access``       ``force_virtual_addressing``    path style (the only style with an endpoint)
``adls.account-name``/``-key``  ``AzureFileSystem(...)``        ``MicrosoftAzure(account=, access_key=)``
``adls.sas-token``             ``sas_token``                   ``sas_query_pairs``
``adls.tenant-id`` ...         ``client_id`` ...               ``client_id``/``client_secret``/``tenant_id``
``gcs.*``                      ``GcsFileSystem(...)``          ``GoogleCloud(bucket)`` (default credentials)
=============================  ==============================  ===========================================

Two fixes on the PyIceberg side (:func:`pyiceberg_properties`): PyIceberg 0.12 ignores
``s3.path-style-access`` (it only knows ``s3.force-virtual-addressing``), and without ``s3.region`` it
asks AWS where the bucket lives, even for an ``s3.endpoint`` that is not AWS.

What DataFusion's stores cannot express (a GCS token or endpoint, an Azure custom authority, virtual-host
addressing with a custom S3 endpoint, anonymous S3) is refused with :class:`ConfigurationError` rather
than silently reaching a different place than PyIceberg.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

if TYPE_CHECKING:
    from datafusion import SessionContext

__all__ = [
    "DEFAULT_S3_REGION",
    "datafusion_object_store",
    "object_store_url",
    "pyiceberg_properties",
    "register_object_store",
]

#: The region assumed for an ``s3.endpoint`` without ``s3.region`` (S3-compatible servers accept any).
DEFAULT_S3_REGION = "us-east-1"

_S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
_GCS_SCHEMES = frozenset({"gs", "gcs"})
_AZURE_SCHEMES = frozenset({"abfs", "abfss", "wasb", "wasbs"})
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def _flag(properties: Mapping[str, str], key: str) -> bool | None:
    value = properties.get(key)
    if value is None or str(value).strip() == "":
        return None
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigurationError(f"property {key!r} must be true or false, got {value!r}")


def _first(properties: Mapping[str, str], *keys: str) -> str | None:
    for key in keys:
        value = properties.get(key)
        if value is not None and str(value) != "":
            return str(value)
    return None


def pyiceberg_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """The properties to give PyIceberg, so that its FileIO reaches the store the properties describe.

    - ``s3.path-style-access`` becomes PyIceberg's ``s3.force-virtual-addressing`` (its negation)
      unless that is set too;
    - with an ``s3.endpoint`` and no ``s3.region``/``client.region``, the region is
      :data:`DEFAULT_S3_REGION`: otherwise PyArrowFileIO asks AWS for the bucket's region, a request to
      the internet for a bucket that is not there.

    :param properties: catalog or FileIO properties (already allowlisted).
    :returns: a new dict; ``properties`` is not changed.
    :raises ConfigurationError: when a boolean property is not true or false.

    >>> pyiceberg_properties({"s3.endpoint": "http://127.0.0.1:8333", "s3.path-style-access": "true"})
    {'s3.endpoint': 'http://127.0.0.1:8333', 's3.path-style-access': 'true', 's3.force-virtual-addressing': 'false', 's3.region': 'us-east-1'}
    """  # noqa: E501
    out = {str(k): str(v) for k, v in properties.items()}
    path_style = _flag(out, "s3.path-style-access")
    if path_style is not None and "s3.force-virtual-addressing" not in out:
        out["s3.force-virtual-addressing"] = "false" if path_style else "true"
    if _first(out, "s3.endpoint") and not _first(out, "s3.region", "client.region"):
        out["s3.region"] = DEFAULT_S3_REGION
    return out


def object_store_url(location: str) -> tuple[str, str | None]:
    """``(scheme://, host)`` under which DataFusion looks up the store of ``location``.

    :raises ConfigurationError: when ``location`` has no scheme, or a remote one has no bucket.

    >>> object_store_url("s3://bucket/wh/db/t/data/f.parquet")
    ('s3://', 'bucket')
    >>> object_store_url("file:///tmp/wh")
    ('file://', None)
    """
    parts = urlsplit(location)
    if not parts.scheme:
        raise ConfigurationError(
            f"location {location!r} has no scheme; use e.g. s3://bucket/path or file:///path"
        )
    if parts.scheme != "file" and not parts.netloc:
        raise ConfigurationError(f"location {location!r} has no bucket or container")
    return f"{parts.scheme}://", parts.netloc or None


def datafusion_object_store(location: str, properties: Mapping[str, str]) -> Any:
    """The DataFusion object store that reaches ``location`` as PyIceberg's FileIO does.

    :param location: a path or prefix under the store, e.g. the table location ``s3://bucket/wh/db/t``.
    :param properties: catalog or FileIO properties (already allowlisted), the same PyIceberg gets.
    :returns: a ``datafusion.object_store`` store for the location's bucket or container.
    :raises ConfigurationError: for an unsupported scheme, or properties DataFusion's store cannot
        express (so it would not reach the same place as PyIceberg).

    >>> store = datafusion_object_store(
    ...     "s3://bucket/wh",
    ...     {"s3.endpoint": "http://127.0.0.1:8333", "s3.access-key-id": "a", "s3.secret-access-key": "s"},
    ... )
    >>> type(store).__name__
    'AmazonS3'
    >>> datafusion_object_store("hdfs://nn/wh", {})
    Traceback (most recent call last):
    ...
    airflow_provider_iceberg_exec.engine.errors.ConfigurationError: DataFusion has no object store for scheme 'hdfs' (location hdfs://nn/wh); supported: abfs, abfss, file, gcs, gs, s3, s3a, s3n, wasb, wasbs
    """  # noqa: E501
    from datafusion import object_store

    scheme = urlsplit(location).scheme or "file"
    props = pyiceberg_properties(properties)
    if scheme == "file":
        return object_store.LocalFileSystem()
    _, host = object_store_url(location)
    assert host is not None  # object_store_url refuses a remote location without one
    if scheme in _S3_SCHEMES:
        return object_store.AmazonS3(**_s3_kwargs(host, props))
    if scheme in _GCS_SCHEMES:
        return object_store.GoogleCloud(**_gcs_kwargs(host, props))
    if scheme in _AZURE_SCHEMES:
        return object_store.MicrosoftAzure(**_azure_kwargs(host, props))
    supported = ", ".join(sorted({"file"} | _S3_SCHEMES | _GCS_SCHEMES | _AZURE_SCHEMES))
    raise ConfigurationError(
        f"DataFusion has no object store for scheme {scheme!r} (location {location}); supported: {supported}"
    )


def register_object_store(ctx: SessionContext, location: str, properties: Mapping[str, str]) -> None:
    """Register in ``ctx`` the store of ``location``, so DataFusion reads and writes where PyIceberg does.

    Call it before reading or writing a remote path with DataFusion (``register_parquet``,
    ``write_parquet``). A local path needs nothing.

    :raises ConfigurationError: as :func:`datafusion_object_store`.
    """
    scheme, host = object_store_url(location)
    if scheme == "file://":
        return
    ctx.register_object_store(scheme, datafusion_object_store(location, properties), host)


def _s3_kwargs(bucket: str, props: Mapping[str, str]) -> dict[str, Any]:
    endpoint = _first(props, "s3.endpoint")
    if _flag(props, "s3.anonymous"):
        raise ConfigurationError("s3.anonymous has no DataFusion equivalent; give credentials instead")
    if _first(props, "s3.role-arn", "client.role-arn"):
        raise ConfigurationError("s3.role-arn has no DataFusion equivalent; give session credentials instead")
    if endpoint and _flag(props, "s3.force-virtual-addressing"):
        # DataFusion's AmazonS3 takes no addressing style: with an endpoint it always addresses
        # endpoint/bucket/key, so a virtual-host-only server would be reached at the wrong URL.
        raise ConfigurationError(
            "virtual-host addressing with a custom s3.endpoint cannot be mapped to DataFusion; "
            "set s3.path-style-access=true"
        )
    kwargs: dict[str, Any] = {
        "bucket_name": bucket,
        "region": _first(props, "s3.region", "client.region"),
        "access_key_id": _first(props, "s3.access-key-id", "client.access-key-id"),
        "secret_access_key": _first(props, "s3.secret-access-key", "client.secret-access-key"),
        "session_token": _first(props, "s3.session-token", "client.session-token"),
    }
    if endpoint:
        scheme = urlsplit(endpoint).scheme
        if scheme not in ("http", "https"):
            raise ConfigurationError(
                f"s3.endpoint must start with http:// or https://, got scheme {scheme!r}"
            )
        kwargs["endpoint"] = endpoint
        kwargs["allow_http"] = scheme == "http"
    if bool(kwargs["access_key_id"]) != bool(kwargs["secret_access_key"]):
        raise ConfigurationError("give both s3.access-key-id and s3.secret-access-key, or neither")
    return kwargs


def _gcs_kwargs(bucket: str, props: Mapping[str, str]) -> dict[str, Any]:
    for key in ("gcs.oauth2.token", "gcs.service.host", "gcs.endpoint"):
        if _first(props, key):
            raise ConfigurationError(
                f"{key} has no DataFusion equivalent (its GoogleCloud store takes only a service account "
                "file); use application default credentials"
            )
    return {"bucket_name": bucket}


def _azure_kwargs(host: str, props: Mapping[str, str]) -> dict[str, Any]:
    """``MicrosoftAzure``'s arguments: the container and account, then credentials, then endpoints."""
    # abfss://container@account.dfs.core.windows.net/path: the container, and the account unless given.
    container, _, account_host = host.partition("@")
    kwargs: dict[str, Any] = {"container_name": container}
    connection = _parse_connection_string(_first(props, "adls.connection-string") or "")
    account = _first(props, "adls.account-name") or connection.get("accountname")
    if account is None and account_host:
        account = account_host.split(".", 1)[0]
    if account:
        kwargs["account"] = account
    kwargs.update(_azure_credentials(props, connection))
    kwargs.update(_azure_endpoints(props, connection))
    return kwargs


def _azure_credentials(props: Mapping[str, str], connection: Mapping[str, str]) -> dict[str, Any]:
    """An account key, a SAS token and a service principal, each from the properties or the connection
    string (the properties win)."""
    kwargs: dict[str, Any] = {}
    key = _first(props, "adls.account-key") or connection.get("accountkey")
    if key:
        kwargs["access_key"] = key
    sas = _first(props, "adls.sas-token") or connection.get("sharedaccesssignature")
    if sas:
        kwargs["sas_query_pairs"] = parse_qsl(sas.lstrip("?"), keep_blank_values=True)
    principal = [_first(props, f"adls.{k}") for k in ("client-id", "client-secret", "tenant-id")]
    if any(principal):
        if not all(principal):
            raise ConfigurationError(
                "give all of adls.client-id, adls.client-secret and adls.tenant-id, or none"
            )
        kwargs["client_id"], kwargs["client_secret"], kwargs["tenant_id"] = principal
    return kwargs


def _azure_endpoints(props: Mapping[str, str], connection: Mapping[str, str]) -> dict[str, Any]:
    """The emulator and plain-HTTP switches; a custom authority is refused (DataFusion cannot reach it)."""
    kwargs: dict[str, Any] = {}
    if connection.get("usedevelopmentstorage", "").lower() == "true":
        kwargs["use_emulator"] = True
    schemes = {_first(props, "adls.blob-storage-scheme"), _first(props, "adls.dfs-storage-scheme")}
    schemes.add(connection.get("defaultendpointsprotocol"))
    if "http" in schemes:
        kwargs["allow_http"] = True
    for authority in ("adls.blob-storage-authority", "adls.dfs-storage-authority"):
        if _first(props, authority):
            raise ConfigurationError(
                f"{authority} has no DataFusion equivalent; only Azure's own hosts are reachable"
            )
    return kwargs


def _parse_connection_string(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(";"):
        name, sep, value = part.partition("=")
        if sep:
            out[name.strip().lower()] = value.strip()
    return out

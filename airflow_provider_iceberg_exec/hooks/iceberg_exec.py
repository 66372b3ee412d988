"""The ``iceberg_exec`` connection type: an Airflow Connection mapped to an engine ``CatalogConfig``.

The mapping is an allowlist (cosmos ``airflow_param_mapping`` style): each connection field and each
named extra becomes one PyIceberg property; an extra that is neither a form field nor an allowlisted
PyIceberg property (``s3.*``, ``gcs.*``, ``adls.*``, ...) is refused. Extras are never passed through,
because the ``py-*-impl`` properties load code chosen by whoever edits the connection.

==========================  =======================================================================
Connection field            PyIceberg property
==========================  =======================================================================
host (+ port)               ``uri``
schema                      ``warehouse``
login + password            ``credential`` = ``login:password`` (REST OAuth2 client credentials);
                            for a SQL catalog, the user and password of the database URI
password alone              ``token`` (REST bearer token)
extra ``catalog_type``      ``type`` (inferred by PyIceberg from the URI when empty)
extra ``catalog_name``      the catalog name (default: the connection id)
extra ``s3_endpoint`` ...   ``s3.endpoint``, ``s3.region``, ``s3.access-key-id``,
                            ``s3.secret-access-key``, ``s3.session-token``, ``s3.path-style-access``
extra ``<property>``        itself, when the engine allowlists it (``gcs.project-id``, ``scope``, ...)
==========================  =======================================================================
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import quote, urlsplit, urlunsplit

from airflow.sdk import BaseHook

if TYPE_CHECKING:
    from airflow.sdk import Connection
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig

__all__ = ["FORM_FIELDS", "IcebergExecHook", "catalog_config_from_connection"]

_LEGACY_PREFIX = "extra__iceberg_exec__"

#: Form fields stored in the connection's extra, and the PyIceberg property each becomes.
FORM_FIELDS: dict[str, str] = {
    "catalog_type": "type",
    "catalog_name": "",  # the catalog's name, not a property
    "s3_endpoint": "s3.endpoint",
    "s3_region": "s3.region",
    "s3_access_key_id": "s3.access-key-id",
    "s3_secret_access_key": "s3.secret-access-key",
    "s3_session_token": "s3.session-token",
    "s3_path_style_access": "s3.path-style-access",
}
_SECRET_FORM_FIELDS = frozenset({"s3_secret_access_key", "s3_session_token"})
_ALIASES = {"type": "type", "warehouse": "warehouse", "uri": "uri"}


def _as_property(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _extra_dict(conn: Connection) -> dict[str, Any]:
    raw = conn.extra
    if not raw:
        return {}
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    try:
        extra = json.loads(raw) if isinstance(raw, str) else dict(raw)
    except (TypeError, ValueError) as err:
        raise ConfigurationError(f"connection {conn.conn_id!r}: extra is not a JSON object") from err
    if not isinstance(extra, dict):
        raise ConfigurationError(f"connection {conn.conn_id!r}: extra is not a JSON object")
    return extra


def _uri(conn: Connection, catalog_type: str | None) -> str | None:
    host = (conn.host or "").strip()
    if not host:
        return None
    parts = urlsplit(host)
    netloc = parts.netloc
    if conn.port and netloc and parts.port is None:
        netloc = f"{netloc}:{conn.port}"
    sql_scheme = parts.scheme.startswith(("sqlite", "postgres", "mysql"))
    is_sql = catalog_type == "sql" or (catalog_type is None and sql_scheme)
    if is_sql and conn.login and netloc and "@" not in netloc:
        userinfo = quote(conn.login, safe="")
        if conn.password:
            userinfo += ":" + quote(conn.password, safe="")
        netloc = f"{userinfo}@{netloc}"
    if netloc == parts.netloc:
        return host  # untouched, e.g. sqlite:////abs/path.db, which urlunsplit would mangle
    return urlunsplit(parts._replace(netloc=netloc))


def catalog_config_from_connection(conn: Connection) -> CatalogConfig:
    """Map ``conn`` to the engine's :class:`CatalogConfig` through the allowlist in the module docstring.

    :param conn: an ``iceberg_exec`` connection.
    :raises ConfigurationError: when an extra is neither a form field nor an allowlisted property.
    """
    from airflow_provider_iceberg_exec.engine.io.catalog import CatalogConfig

    name, properties = _extra_properties(conn)
    properties.update(_field_properties(conn, properties.get("type")))
    return CatalogConfig(name, properties)


def _extra_properties(conn: Connection) -> tuple[str, dict[str, str]]:
    """The catalog name and the properties of ``conn``'s extras; an extra off the allowlist is refused."""
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
    from airflow_provider_iceberg_exec.engine.io.catalog import ALLOWED_PROPERTY_PATTERNS

    properties: dict[str, str] = {}
    name = conn.conn_id
    refused: list[str] = []
    for raw_key, value in _extra_dict(conn).items():
        key = raw_key.removeprefix(_LEGACY_PREFIX)
        if value is None or value == "":
            continue
        if key == "catalog_name":
            name = str(value)
            continue
        prop = _property_of(key)
        if prop is None:
            refused.append(key)
        else:
            properties[prop] = _as_property(value)
    if refused:
        raise ConfigurationError(
            f"connection {conn.conn_id!r}: extra keys {sorted(refused)} are not allowed; use the form fields "
            f"{sorted(FORM_FIELDS)} or PyIceberg properties matching {list(ALLOWED_PROPERTY_PATTERNS)}"
        )
    return name, properties


def _property_of(key: str) -> str | None:
    """The PyIceberg property an extra ``key`` sets: a form field's, an alias's, or an allowlisted key."""
    if key in FORM_FIELDS:
        return FORM_FIELDS[key]
    if key in _ALIASES:
        return _ALIASES[key]
    return key if _allowed(key) else None


def _field_properties(conn: Connection, catalog_type: str | None) -> dict[str, str]:
    """``uri``, ``warehouse``, and ``credential`` or ``token``, from ``conn``'s fields (over any extra)."""
    properties: dict[str, str] = {}
    uri = _uri(conn, catalog_type)
    if uri:
        properties["uri"] = uri
    if conn.schema:
        properties["warehouse"] = conn.schema
    sql_credentials_in_uri = bool(uri) and conn.login and "@" in urlsplit(uri or "").netloc
    if conn.login and conn.password and not sql_credentials_in_uri:
        properties["credential"] = f"{conn.login}:{conn.password}"
    elif conn.password and not conn.login:
        properties["token"] = conn.password
    return properties


def _allowed(key: str) -> bool:
    import re

    from airflow_provider_iceberg_exec.engine.io.catalog import ALLOWED_PROPERTY_PATTERNS

    return re.fullmatch("(?:" + "|".join(ALLOWED_PROPERTY_PATTERNS) + ")", key) is not None


def connection_secrets(conn: Connection, config: CatalogConfig) -> list[str]:
    """Every secret value of ``conn`` and ``config``, for the secrets masker.

    :param conn: the connection.
    :param config: the catalog config mapped from it.
    """
    secrets = [*config.secrets()]
    if conn.password:
        secrets.append(conn.password)
    extra = _extra_dict(conn)
    secrets.extend(
        str(extra[k]) for k in extra if k.removeprefix(_LEGACY_PREFIX) in _SECRET_FORM_FIELDS and extra[k]
    )
    return sorted(set(secrets))


class IcebergExecHook(BaseHook):
    """Access an Iceberg catalog described by an ``iceberg_exec`` connection.

    :param iceberg_exec_conn_id: the connection id (default ``iceberg_exec_default``).

    .. seealso:: :func:`catalog_config_from_connection` for the field mapping.
    """

    conn_name_attr = "iceberg_exec_conn_id"
    default_conn_name = "iceberg_exec_default"
    conn_type = "iceberg_exec"
    hook_name = "Iceberg catalog (iceberg-exec)"

    #: the form's extra fields as ``name: (label, kind)``; provider info's ``conn-fields`` declares the
    #: same (a unit test keeps them in sync)
    CONN_FIELDS: ClassVar[Mapping[str, tuple[str, str]]] = {
        "catalog_type": ("Catalog type", "string"),
        "catalog_name": ("Catalog name", "string"),
        "s3_endpoint": ("S3 endpoint", "string"),
        "s3_region": ("S3 region", "string"),
        "s3_access_key_id": ("S3 access key id", "string"),
        "s3_secret_access_key": ("S3 secret access key", "password"),
        "s3_session_token": ("S3 session token", "password"),
        "s3_path_style_access": ("S3 path-style access", "boolean"),
    }

    def __init__(self, iceberg_exec_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.iceberg_exec_conn_id = iceberg_exec_conn_id

    @cached_property
    def catalog_config(self) -> CatalogConfig:
        """The engine catalog config of the connection, its secrets registered with the masker."""
        from airflow.sdk.log import mask_secret

        conn = self.get_connection(self.iceberg_exec_conn_id)
        config = catalog_config_from_connection(conn)
        for secret in connection_secrets(conn, config):
            mask_secret(secret)
        return config

    @property
    def catalog_name(self) -> str:
        """The catalog's name: the ``catalog_name`` extra, or the connection id."""
        return self.catalog_config.name

    def get_conn(self) -> Catalog:
        """Return the PyIceberg catalog.

        :raises ConfigurationError: when the connection does not describe a loadable catalog.
        """
        from airflow_provider_iceberg_exec.engine.io.catalog import load_catalog

        return load_catalog(self.catalog_config)

    def load_table(self, table: str) -> Table:
        """Load ``"ns.table"``.

        :raises TableNotFoundError: when it does not exist.
        """
        from airflow_provider_iceberg_exec.engine.io.catalog import load_table

        return load_table(self.get_conn(), table)

    def test_connection(self) -> tuple[bool, str]:
        """Load the catalog and list its namespaces; report success or the reason, never raise."""
        try:
            catalog = self.get_conn()
            namespaces = catalog.list_namespaces()
        except Exception as err:  # test_connection must report, not raise
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            return False, f"{type(err).__name__}: {reason}"
        return True, f"Connected to catalog {self.catalog_name!r} ({len(namespaces)} top-level namespaces)"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Relabel, hide and explain the standard connection fields (older Airflow cores read this)."""
        return {
            "hidden_fields": ["port", "extra"],
            "relabeling": {
                "host": "Catalog URI",
                "schema": "Warehouse",
                "login": "Client ID",
                "password": "Client secret or token",
            },
            "placeholders": {
                "host": "http://rest-catalog:8181 or sqlite:////data/catalog.db",
                "schema": "s3://bucket/warehouse or file:///data/warehouse",
                "login": "OAuth2 client id (REST catalogs; leave empty for a bearer token)",
                "password": "OAuth2 client secret, or a bearer token when Client ID is empty",
                "catalog_type": "rest, sql, hive, glue or dynamodb (inferred from the URI if empty)",
                "catalog_name": "name used in logs and asset URIs (default: the connection id)",
                "s3_endpoint": "http://minio:9000",
                "s3_region": "us-east-1",
            },
        }

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """The extra fields of the connection form (older Airflow cores read this)."""
        from flask_appbuilder.fieldwidgets import BS3PasswordFieldWidget, BS3TextFieldWidget
        from flask_babel import lazy_gettext
        from wtforms import BooleanField, PasswordField, StringField

        widgets: dict[str, Any] = {}
        for name, (label, kind) in cls.CONN_FIELDS.items():
            if kind == "password":
                widgets[name] = PasswordField(lazy_gettext(label), widget=BS3PasswordFieldWidget())
            elif kind == "boolean":
                widgets[name] = BooleanField(lazy_gettext(label), default=False)
            else:
                widgets[name] = StringField(lazy_gettext(label), widget=BS3TextFieldWidget())
        return widgets

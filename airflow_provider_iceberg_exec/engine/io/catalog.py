"""Catalog access: allowlisted catalog properties -> a PyIceberg catalog, and table lookup.

The engine never reads ``~/.pyiceberg.yaml`` or environment variables itself: the CLI and the Airflow hook
gather properties and pass them in. Properties that load code (``py-catalog-impl``, ``py-io-impl`` and the
other ``*-impl`` keys) are refused, because whoever edits a connection must not choose what code runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.errors import (
    CatalogUnavailableError,
    CommitConflictError,
    ConfigurationError,
    IcebergExecError,
    TableNotFoundError,
    first_line,
)

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

__all__ = [
    "ALLOWED_PROPERTY_PATTERNS",
    "CatalogConfig",
    "catalog_errors",
    "is_locked",
    "load_catalog",
    "load_table",
    "parse_table_name",
    "refresh_table",
    "table_name",
]

#: Catalog and FileIO properties the engine accepts. Anything else is refused with the list below.
ALLOWED_PROPERTY_PATTERNS: tuple[str, ...] = (
    r"type",
    r"uri",
    r"warehouse",
    r"credential",
    r"token",
    r"scope",
    r"prefix",
    r"oauth2-server-uri",
    r"audience",
    r"resource",
    r"header\.[A-Za-z0-9-]+",
    r"rest\.sigv4-enabled",
    r"rest\.signing-region",
    r"rest\.signing-name",
    r"echo",
    r"pool_pre_ping",
    r"init_catalog_tables",
    r"s3\.(endpoint|access-key-id|secret-access-key|session-token|region|path-style-access|"
    r"force-virtual-addressing|connect-timeout|request-timeout|signer\.uri|role-arn|role-session-name|"
    r"anonymous)",
    r"client\.(region|access-key-id|secret-access-key|session-token|role-arn)",
    r"gcs\.(project-id|oauth2\.token|oauth2\.token-expires-at|access|consistency|cache-timeout|"
    r"requester-pays|session-kwargs|endpoint|default-location|version-aware|service\.host)",
    r"adls\.(connection-string|account-name|account-key|sas-token|tenant-id|client-id|client-secret|"
    r"account-host|blob-storage-authority|dfs-storage-authority|blob-storage-scheme|dfs-storage-scheme)",
    r"hive\.[a-z0-9.-]+",
    r"glue\.(id|region|access-key-id|secret-access-key|session-token|profile-name|max-retries|"
    r"retry-mode|endpoint|skip-archive)",
    r"dynamodb\.(region|access-key-id|secret-access-key|session-token|profile-name|endpoint)",
)
_ALLOWED = re.compile("^(?:" + "|".join(ALLOWED_PROPERTY_PATTERNS) + ")$")
_SECRET_KEY = re.compile(r"(secret|token|credential|password|key-id|account-key|sas|connection-string)")


@dataclass(frozen=True)
class CatalogConfig:
    """A catalog's name and its (allowlisted) PyIceberg properties.

    :param name: the catalog name, as in ``~/.pyiceberg.yaml``.
    :param properties: PyIceberg catalog and FileIO properties, e.g. ``{"type": "sql", "uri": ...}``.
    :raises ConfigurationError: when a property is not allowlisted.

    >>> CatalogConfig("demo", {"type": "sql", "uri": "sqlite:///c.db"}).properties["type"]
    'sql'
    >>> CatalogConfig("x", {"py-io-impl": "evil.IO"})
    Traceback (most recent call last):
    ...
    airflow_provider_iceberg_exec.engine.errors.ConfigurationError: catalog property 'py-io-impl' is not allowed (it would load code or is unknown); remove it
    """  # noqa: E501

    name: str
    properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key in self.properties:
            if not _ALLOWED.match(key):
                raise ConfigurationError(
                    f"catalog property {key!r} is not allowed (it would load code or is unknown); remove it"
                )

    def secrets(self) -> list[str]:
        """The values of secret properties, for masking in logs.

        >>> CatalogConfig("c", {"s3.secret-access-key": "hunter2", "uri": "u"}).secrets()
        ['hunter2']
        >>> CatalogConfig("c", {"uri": "postgresql+psycopg2://u:pw@127.0.0.1/db"}).secrets()
        ['pw']
        """
        found = [str(v) for k, v in self.properties.items() if _SECRET_KEY.search(k) and v]
        # A SQL catalog's database password travels in its URI (postgresql://user:password@host/db).
        password = _uri_password(self.properties.get("uri"))
        if password:
            from urllib.parse import unquote

            found.extend(sorted({password, unquote(password)}))
        return found

    def __repr__(self) -> str:
        # Never print secrets, even in a traceback's repr.
        shown = {k: ("***" if _SECRET_KEY.search(k) else v) for k, v in self.properties.items()}
        password = _uri_password(self.properties.get("uri"))
        if password:
            shown["uri"] = str(shown["uri"]).replace(f":{password}@", ":***@")
        return f"CatalogConfig(name={self.name!r}, properties={shown!r})"


def _uri_password(uri: str | None) -> str | None:
    """The password in a database URI's user info, if any (as written, not URL-decoded)."""
    if not uri or "@" not in uri:
        return None
    from urllib.parse import urlsplit

    try:
        netloc = urlsplit(uri).netloc
    except ValueError:
        return None
    userinfo, at, _host = netloc.rpartition("@")
    _user, colon, password = userinfo.partition(":")
    return password if at and colon and password else None


def load_catalog(config: CatalogConfig) -> Catalog:
    """Build the PyIceberg catalog of ``config``.

    :raises ConfigurationError: when the catalog cannot be constructed from the properties.
    """
    from pyiceberg.catalog import load_catalog as _load

    if "type" not in config.properties and "uri" not in config.properties:
        raise ConfigurationError(
            f"catalog {config.name!r} has no 'type' or 'uri'; configure it in ~/.pyiceberg.yaml, "
            f"PYICEBERG_CATALOG__{config.name.upper()}__* variables or the Airflow connection"
        )
    from airflow_provider_iceberg_exec.engine.io.storage import pyiceberg_properties

    with catalog_errors(config.name):
        # Storage mapping (engine/io/storage.py): s3.path-style-access and a region for an s3.endpoint,
        # which PyIceberg's FileIO would otherwise ignore or look up at AWS.
        return _load(config.name, **pyiceberg_properties(config.properties))
    raise AssertionError("unreachable")  # pragma: no cover - catalog_errors re-raises


@contextmanager
def catalog_errors(name: str) -> Iterator[None]:
    """Turn a catalog's failures into one-line engine errors that name the catalog.

    - support not installed, bad properties, access denied or bad credentials: :class:`ConfigurationError`
      (fix the configuration; a retry cannot succeed);
    - unreachable endpoint, timeout, throttling or a server error: :class:`CatalogUnavailableError`
      (transient; a retry may succeed).

    Only the first line of a driver's message is kept, and never the URI: it may carry a password.
    """
    from pyiceberg.exceptions import (
        ForbiddenError,
        NotInstalledError,
        OAuthError,
        RESTError,
        ServerError,
        ServiceUnavailableError,
        TooManyRequestsError,
        UnauthorizedError,
    )

    try:
        yield
    except IcebergExecError:
        raise
    except (NotInstalledError, ImportError) as err:
        raise ConfigurationError(f"cannot load catalog {name!r}: {first_line(err)}") from err
    except (ValueError, NotImplementedError) as err:
        raise ConfigurationError(f"catalog {name!r}: {first_line(err)}") from err
    except (ForbiddenError, UnauthorizedError, OAuthError) as err:
        raise ConfigurationError(
            f"catalog {name!r} refused the credentials ({type(err).__name__}): {first_line(err)}"
        ) from err
    except (ServiceUnavailableError, TooManyRequestsError, ServerError, OSError, TimeoutError) as err:
        # requests' ConnectionError and Timeout are OSErrors; so are the storage's network errors.
        raise CatalogUnavailableError(
            f"catalog {name!r} is unavailable ({type(err).__name__}): {first_line(err)}; retry later"
        ) from err
    except RESTError as err:
        raise CatalogUnavailableError(f"catalog {name!r} failed: {first_line(err)}") from err
    except Exception as err:
        # A SQL catalog opens its database here; SQLAlchemy's errors would otherwise surface as
        # tracebacks.
        if not type(err).__module__.startswith("sqlalchemy"):
            raise
        raise _database_error(name, err) from err


def _database_error(name: str, err: Exception) -> IcebergExecError:
    """The engine error for a SQL catalog's SQLAlchemy error ``err``: a lock is a conflict (retry),
    a connection failure is transient, the rest is configuration."""
    from sqlalchemy.exc import DBAPIError, OperationalError
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    if is_locked(err):
        return CommitConflictError(
            f"the database of catalog {name!r} is locked by another writer (database is locked); retry later"
        )
    if isinstance(err, (OperationalError, PoolTimeout)) or (
        isinstance(err, DBAPIError) and err.connection_invalidated
    ):
        return CatalogUnavailableError(f"cannot reach the database of catalog {name!r}: {first_line(err)}")
    return ConfigurationError(f"cannot open the database of catalog {name!r}: {first_line(err)}")


def refresh_table(table: Table) -> Table:
    """``table.refresh()``, its catalog's failures as one-line engine errors (:func:`catalog_errors`)."""
    with catalog_errors(table_name(table)):
        table.refresh()
    return table


def is_locked(err: BaseException) -> bool:
    """Whether a SQL catalog's driver error says the database is locked by another writer (SQLite).

    >>> is_locked(RuntimeError("(sqlite3.OperationalError) database is locked"))
    True
    """
    text = str(err)
    return "database is locked" in text or "database table is locked" in text or "database is busy" in text


def table_name(table: Table) -> str:
    """The table's name as documents, logs and errors carry it: ``namespace.table``."""
    return ".".join(table.name())


def parse_table_name(name: str) -> tuple[str, ...]:
    """Split ``"ns.table"`` (or ``"ns1.ns2.table"``) into identifier parts.

    :raises ConfigurationError: when there is no namespace or a part is empty.

    >>> parse_table_name("db.events")
    ('db', 'events')
    """
    parts = tuple(name.split("."))
    if len(parts) < 2 or any(not p.strip() for p in parts):
        raise ConfigurationError(f"table name {name!r} must be fully qualified as 'namespace.table'")
    return parts


def load_table(catalog: Catalog, name: str) -> Table:
    """Load ``"ns.table"`` from ``catalog``.

    :raises TableNotFoundError: when the namespace or the table does not exist.
    """
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError, ValidationError

    identifier = parse_table_name(name)
    with catalog_errors(catalog.name):
        try:
            return catalog.load_table(identifier)
        except (NoSuchTableError, NoSuchNamespaceError) as err:
            raise TableNotFoundError(f"table {name!r} not found in catalog {catalog.name!r}") from err
        except ValidationError as err:
            if (version := _unknown_format_version(err)) is None:
                raise
            raise ConfigurationError(
                f"table {name!r} in catalog {catalog.name!r}: format version {version} is not supported "
                "(at most 3); table left unchanged"
            ) from err
    raise AssertionError("unreachable")  # pragma: no cover - catalog_errors re-raises


def _unknown_format_version(err: Exception) -> str | None:
    """The format version PyIceberg's metadata parser did not know (Java 1.10 writes up to 4), if that
    was the failure; pydantic words it "Input tag '4' found using 'format_version' ..."."""
    text = str(err)
    match = re.search(r"Input tag '(\d+)' found using 'format_version'", text) or re.search(
        r"Unknown format version: (\d+)", text
    )
    return match.group(1) if match else None

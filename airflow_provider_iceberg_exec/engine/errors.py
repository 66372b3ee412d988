"""Exceptions raised by the engine.

The whole tree::

    IcebergExecError(Exception)
    ├── ConfigurationError(IcebergExecError, ValueError)  bad spec, option, limit or catalog property
    ├── TableNotFoundError(ConfigurationError)            unknown catalog, namespace or table
    ├── DataFileCodecError(IcebergExecError, ValueError)  malformed or unknown-version JSON payload
    ├── ResourceLimitError(IcebergExecError)              memory or spill disk exhausted
    ├── DataFileReadError(IcebergExecError)               an input data file is missing or corrupt
    ├── CatalogUnavailableError(IcebergExecError)         the catalog or the storage cannot be reached
    │                                                     or throttles (transient: a retry may succeed)
    ├── IncompleteRunError(IcebergExecError)              planned tasks failed: nothing may be committed
    ├── IncompleteListingError(IcebergExecError)          an orphan scan's listing or reference set looks
    │                                                     partial: nothing is called an orphan (retry)
    ├── CommitConflictError(IcebergExecError)             the table moved under us (retry or re-plan)
    │   └── CommitValidationError(CommitConflictError)    Java's ValidationException: re-plan, do not retry
    └── CommitStateUnknownError(IcebergExecError)         the catalog did not say; never retried blindly

Engine exceptions never subclass Airflow's; the Airflow layer maps them in one place.
"""

from __future__ import annotations

__all__ = [
    "CatalogUnavailableError",
    "CommitConflictError",
    "CommitStateUnknownError",
    "CommitValidationError",
    "ConfigurationError",
    "DataFileCodecError",
    "DataFileReadError",
    "IcebergExecError",
    "IncompleteListingError",
    "IncompleteRunError",
    "ResourceLimitError",
    "TableNotFoundError",
    "first_line",
]


class IcebergExecError(Exception):
    """Base class of every error the engine raises on purpose."""


class ConfigurationError(IcebergExecError, ValueError):
    """Raised for bad input: an unknown option, an unparsable predicate, a limit below its floor."""


class TableNotFoundError(ConfigurationError):
    """Raised when the catalog, namespace or table does not exist."""


class DataFileCodecError(IcebergExecError, ValueError):
    """Raised when a DataFile or envelope JSON document is malformed or of an unknown version."""


class ResourceLimitError(IcebergExecError):
    """Raised when the memory pool or the spill disk is exhausted."""


class DataFileReadError(IcebergExecError):
    """Raised when an input data file is missing or cannot be read as Parquet."""


class CatalogUnavailableError(IcebergExecError):
    """Raised when the catalog or the storage cannot be reached, times out or throttles; retry later."""


class IncompleteRunError(IcebergExecError):
    """Raised when planned tasks delivered no result and the others may not be committed without them."""


class IncompleteListingError(IcebergExecError):
    """Raised when the listing cannot be complete, so that deleting what it calls orphans is unsafe.

    A referenced file under the scanned locations is missing from the listing, or a category of references
    (data, manifests, manifest lists, metadata) is empty for a table with snapshots. Nothing is deleted; a
    retry may succeed when the listing was cut short by the store.
    """


class CommitConflictError(IcebergExecError):
    """Raised when the table changed in a way that makes this commit fail; a retry may succeed."""


class CommitValidationError(CommitConflictError):
    """Raised when validation from the base snapshot fails: the work must be planned again."""


class CommitStateUnknownError(IcebergExecError):
    """Raised when the catalog's answer to a commit is unknown; check the table before retrying."""


def first_line(err: BaseException) -> str:
    """The first line of ``err``'s message (driver messages run long), or its class name.

    >>> first_line(ValueError("bad\\nmore"))
    'bad'
    """
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__

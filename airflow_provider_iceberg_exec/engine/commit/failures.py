"""What a failed commit means: PyIceberg's and the SQL catalog driver's errors as the engine's errors.

:func:`commit_failure` decides, for an error out of the catalog commit (PyIceberg's retry loop included),
whether the work must be planned again (:class:`~.errors.CommitValidationError`), may simply be retried
later (:class:`~.errors.CommitConflictError`), or may have landed (:class:`~.errors.CommitStateUnknownError`:
check the table by commit id first).
"""

from __future__ import annotations

from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException, ValidationException

from airflow_provider_iceberg_exec.engine.commit.idempotency import COMMIT_ID_PROPERTY
from airflow_provider_iceberg_exec.engine.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    CommitValidationError,
    IcebergExecError,
    first_line,
)

__all__ = ["commit_failure"]


def commit_failure(err: Exception, commit_id: str, name: str) -> IcebergExecError | None:
    """The engine error ``err`` means for commit ``commit_id`` to table ``name``, or ``None`` to re-raise it.

    >>> commit_failure(ValueError("x"), "c", "ns.t") is None
    True
    """
    if isinstance(err, ValidationException):
        return CommitValidationError(_one_line(err))
    if isinstance(err, CommitFailedException):
        return CommitConflictError(
            f"commit {commit_id} to {name} kept conflicting with concurrent commits until the retries "
            f"ran out: {_one_line(err)}"
        )
    if isinstance(err, CommitStateUnknownException):
        return CommitStateUnknownError(
            f"the catalog did not confirm commit {commit_id} to {name}; check for a snapshot with "
            f"{COMMIT_ID_PROPERTY}={commit_id} before retrying: {_one_line(err)}"
        )
    return _database_failure(err, commit_id, name)


def _database_failure(err: Exception, commit_id: str, name: str) -> IcebergExecError | None:
    """A SQL catalog's driver error during the pointer swap, as the engine error it means, or ``None``.

    A locked database (SQLite) refused the swap: nothing was committed, retry later. A connection lost
    or invalidated may have lost the reply to a swap that landed: the state is unknown, as Java's
    ``JdbcTableOperations`` reports it; the next run reconciles by commit id.
    """
    if not type(err).__module__.startswith("sqlalchemy"):
        return None
    from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

    from airflow_provider_iceberg_exec.engine.io.catalog import is_locked

    if is_locked(err):
        return CommitConflictError(
            f"the catalog database of {name} is locked by another writer (database is locked); nothing was "
            "committed, retry later"
        )
    if isinstance(err, (OperationalError, InterfaceError)) or (
        isinstance(err, DBAPIError) and err.connection_invalidated
    ):
        first = first_line(getattr(err, "orig", None) or err)
        return CommitStateUnknownError(
            f"the catalog's database connection was lost during commit {commit_id} to {name} ({first}); "
            f"check for a snapshot with {COMMIT_ID_PROPERTY}={commit_id} before retrying"
        )
    return None


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__

"""engine/commit/failures.py: which PyIceberg and SQLAlchemy errors of a commit mean which engine error.

Validation failures must be planned again, exhausted conflict retries may be retried later, an
unconfirmed commit may have landed (check by commit id), a locked SQLite database committed nothing,
a lost or invalidated connection leaves the state unknown, and anything else is re-raised (``None``).
The errors are the real exception classes, built as their libraries build them."""

from __future__ import annotations

import sqlite3

import pytest
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    NoSuchTableError,
    ValidationException,
)
from sqlalchemy.exc import (
    DBAPIError,
    IntegrityError,
    InterfaceError,
    NoResultFound,
    OperationalError,
)

from airflow_provider_iceberg_exec.engine.commit.failures import commit_failure
from airflow_provider_iceberg_exec.engine.commit.idempotency import AlreadyCommittedError
from airflow_provider_iceberg_exec.engine.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    CommitValidationError,
)

COMMIT = "job-7"
NAME = "ns.events"


def test_a_validation_exception_means_plan_again_in_one_line() -> None:
    failure = commit_failure(ValidationException("deleted file\n   was   removed"), COMMIT, NAME)
    assert type(failure) is CommitValidationError
    assert str(failure) == "deleted file was removed"


def test_a_validation_exception_without_message_is_named_by_its_class() -> None:
    failure = commit_failure(ValidationException(), COMMIT, NAME)
    assert type(failure) is CommitValidationError
    assert str(failure) == "ValidationException"


def test_already_committed_is_a_validation_failure(catalog) -> None:
    import pyarrow as pa

    table = catalog.create_table("ns.t", schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1]}))
    snapshot = table.current_snapshot()
    failure = commit_failure(AlreadyCommittedError(snapshot), COMMIT, NAME)
    assert type(failure) is CommitValidationError
    assert str(failure) == f"commit already landed as snapshot {snapshot.snapshot_id}"


def test_commit_failed_means_a_conflict_that_ran_out_of_retries() -> None:
    failure = commit_failure(
        CommitFailedException("Requirement failed:\nbranch main has changed"), COMMIT, NAME
    )
    assert type(failure) is CommitConflictError
    assert str(failure) == (
        "commit job-7 to ns.events kept conflicting with concurrent commits until the retries ran out: "
        "Requirement failed: branch main has changed"
    )


def test_commit_state_unknown_says_to_check_by_commit_id() -> None:
    failure = commit_failure(CommitStateUnknownException("gateway timeout"), COMMIT, NAME)
    assert type(failure) is CommitStateUnknownError
    assert str(failure) == (
        "the catalog did not confirm commit job-7 to ns.events; check for a snapshot with "
        "iceberg-exec.commit-id=job-7 before retrying: gateway timeout"
    )


def _operational(message: str) -> OperationalError:
    return OperationalError("UPDATE iceberg_tables SET ...", {}, sqlite3.OperationalError(message))


@pytest.mark.parametrize("message", ["database is locked", "database table is locked", "database is busy"])
def test_a_locked_sqlite_database_is_a_conflict_nothing_committed(message: str) -> None:
    failure = commit_failure(_operational(message), COMMIT, NAME)
    assert type(failure) is CommitConflictError
    assert str(failure) == (
        "the catalog database of ns.events is locked by another writer (database is locked); nothing was "
        "committed, retry later"
    )


def test_a_lost_connection_leaves_the_state_unknown_with_the_driver_first_line() -> None:
    failure = commit_failure(_operational("server closed the connection\nunexpectedly"), COMMIT, NAME)
    assert type(failure) is CommitStateUnknownError
    assert str(failure) == (
        "the catalog's database connection was lost during commit job-7 to ns.events "
        "(server closed the connection); check for a snapshot with iceberg-exec.commit-id=job-7 "
        "before retrying"
    )


def test_an_interface_error_leaves_the_state_unknown() -> None:
    err = InterfaceError("SELECT 1", {}, sqlite3.InterfaceError("connection already closed"))
    failure = commit_failure(err, COMMIT, NAME)
    assert type(failure) is CommitStateUnknownError
    assert "(connection already closed)" in str(failure)


def test_an_invalidated_connection_leaves_the_state_unknown() -> None:
    err = DBAPIError("UPDATE t", {}, sqlite3.DatabaseError("connection reset"), connection_invalidated=True)
    failure = commit_failure(err, COMMIT, NAME)
    assert type(failure) is CommitStateUnknownError
    assert "(connection reset)" in str(failure)


def test_a_driver_error_on_a_valid_connection_is_reraised() -> None:
    assert (
        commit_failure(DBAPIError("UPDATE t", {}, sqlite3.DatabaseError("disk I/O error")), COMMIT, NAME)
        is None
    )
    err = IntegrityError("INSERT", {}, sqlite3.IntegrityError("UNIQUE constraint failed"))
    assert commit_failure(err, COMMIT, NAME) is None


def test_a_locked_message_wins_even_on_an_integrity_error() -> None:
    """The lock check reads the message of any SQLAlchemy error, before its class."""
    err = IntegrityError("INSERT", {}, sqlite3.IntegrityError("database is locked"))
    assert type(commit_failure(err, COMMIT, NAME)) is CommitConflictError


def test_a_non_driver_sqlalchemy_error_is_reraised() -> None:
    assert commit_failure(NoResultFound("No row was found"), COMMIT, NAME) is None


@pytest.mark.parametrize(
    "err",
    [
        ValueError("x"),
        NoSuchTableError("ns.events"),
        RuntimeError("(sqlite3.OperationalError) database is locked"),
    ],
)
def test_other_errors_are_reraised(err: Exception) -> None:
    """Only SQLAlchemy's own errors are read as driver errors, whatever their message says."""
    assert commit_failure(err, COMMIT, NAME) is None

"""engine/errors.py: the exception tree the Airflow layer maps (bad input, conflicts, the rest)."""

from __future__ import annotations

import pytest

from airflow_provider_iceberg_exec.engine import errors


def test_every_engine_error_is_an_iceberg_exec_error_and_never_an_airflow_one() -> None:
    for name in errors.__all__:
        member = getattr(errors, name)
        if isinstance(member, type):
            assert issubclass(member, errors.IcebergExecError), name
            assert not any(base.__module__.split(".")[0] == "airflow" for base in member.__mro__), name


@pytest.mark.parametrize(
    ("error", "bases"),
    [
        (errors.ConfigurationError, (ValueError,)),
        (errors.TableNotFoundError, (errors.ConfigurationError, ValueError)),
        (errors.DataFileCodecError, (ValueError,)),
        (errors.CommitValidationError, (errors.CommitConflictError,)),
    ],
)
def test_bad_input_is_a_value_error_and_a_validation_failure_a_conflict(error, bases) -> None:
    assert issubclass(error, bases)


@pytest.mark.parametrize(
    "error",
    [errors.CommitStateUnknownError, errors.CatalogUnavailableError, errors.ResourceLimitError],
)
def test_errors_that_need_another_look_are_not_conflicts_nor_bad_input(error) -> None:
    """The Airflow layer retries conflicts and fails bad input at once; these are neither."""
    assert not issubclass(error, (errors.CommitConflictError, ValueError))


def test_first_line_keeps_the_first_line_or_names_the_class() -> None:
    assert errors.first_line(RuntimeError("  driver said\nno\nmore")) == "driver said"
    assert errors.first_line(KeyError()) == "KeyError"

"""pyproject's ``filterwarnings``: a PyIceberg deprecation is an error, other libraries' are not.

PyIceberg emits its deprecations from its own modules (``pyiceberg.utils.deprecated``), so the
``error::DeprecationWarning:pyiceberg`` filter catches them whoever calls the deprecated function: an
upgrade of PyIceberg that deprecates what the engine calls fails the suite instead of passing silently.
"""

from __future__ import annotations

import warnings

import pytest


def test_a_deprecated_pyiceberg_function_called_by_our_code_raises() -> None:
    from pyiceberg.utils.deprecated import deprecated

    @deprecated(deprecated_in="0.1.0", removed_in="9.9.9", help_message="use the new one")
    def engine_helper() -> int:
        return 1

    with pytest.raises(DeprecationWarning, match=r"Call to engine_helper, deprecated in 0\.1\.0"):
        engine_helper()


def test_a_pyiceberg_deprecation_message_raises() -> None:
    from pyiceberg.utils.deprecated import deprecation_message

    with pytest.raises(DeprecationWarning, match=r"will be removed in 9\.9\.9"):
        deprecation_message(deprecated_in="0.1.0", removed_in="9.9.9", help_message="a property")


def test_a_deprecation_of_another_library_is_ignored() -> None:
    """Airflow and others deprecate freely; only PyIceberg's are errors (the engine drives PyIceberg)."""
    warnings.warn("another library's deprecation", DeprecationWarning, stacklevel=1)

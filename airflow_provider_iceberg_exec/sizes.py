"""The provider's one grammar of byte sizes (``256MiB``, ``2G``, ``1048576``), shared by every layer.

It lives outside :mod:`airflow_provider_iceberg_exec.engine` because DAG files call
:func:`airflow_provider_iceberg_exec.settings.pool_slots_for` while they are parsed, and parsing a DAG
must not import the engine (``tests/unit/airflow_layer/test_example_dags.py``). It imports neither
Airflow nor the engine, so the engine (``engine.config``) uses it too and both accept and refuse exactly
the same strings.
"""

from __future__ import annotations

import re

__all__ = ["parse_byte_size"]

#: a decimal number (ASCII digits), optional spaces, an optional unit; ``Ki``/``KB``/``KiB`` all mean 1024.
_SIZE_RE = re.compile(r"\s*(\d+)(?:\.(\d+))?\s*(?:([KMGT])(?:iB|i|B)?|B)?\s*", re.IGNORECASE | re.ASCII)
_FACTORS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_FORMS = (
    "an integer count of bytes, or a number with a unit B, K, Ki, KB, KiB (or M, G, T alike), e.g. 256MiB"
)


def parse_byte_size(text: str | int) -> int:
    """Parse a byte size: an ``int`` as is, or a string in the grammar below.

    The grammar, case-insensitive, with optional spaces around the number and the unit:

    - a number: ASCII digits with an optional fraction (``1.5``); no sign, exponent or separators;
    - an optional unit: ``B``, or ``K``, ``M``, ``G``, ``T`` followed by nothing, ``i``, ``B`` or ``iB``.
      Every unit is binary: ``K``, ``Ki``, ``KB`` and ``KiB`` are all 1024 bytes (as Kubernetes' ``Ki``
      and as the engine has always read ``KB``).

    A fraction of a byte is dropped (``1.5`` is 1 byte).

    :param text: the size.
    :returns: the size in bytes.
    :raises ConfigurationError: (a ``ValueError``) when the text is not a size; the message names the
        value and the accepted forms.

    >>> parse_byte_size("256MiB")
    268435456
    >>> parse_byte_size("1.5 gb")
    1610612736
    >>> parse_byte_size("64Ki")
    65536
    >>> parse_byte_size(" 1048576 ")
    1048576
    >>> parse_byte_size(1024)
    1024
    >>> parse_byte_size("256iB")
    Traceback (most recent call last):
    ...
    airflow_provider_iceberg_exec.engine.errors.ConfigurationError: not a byte size: '256iB'; use an integer count of bytes, or a number with a unit B, K, Ki, KB, KiB (or M, G, T alike), e.g. 256MiB
    """  # noqa: E501
    if isinstance(text, int):
        return text
    match = _SIZE_RE.fullmatch(text)
    if not match:
        # Imported here, on the failure path only: a DAG file that parses imports no engine module.
        from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

        raise ConfigurationError(f"not a byte size: {text!r}; use {_FORMS}")
    whole: str = match[1]
    fraction: str = match[2] or ""
    factor = _FACTORS[(match[3] or "").upper()]
    scale: int = 10 ** len(fraction)
    # In integers, so that a size is exact however large (a float has 53 bits).
    return int(whole) * factor + int(fraction or "0") * factor // scale

"""Key fingerprints: 32 bits of a digest of each null-safe key, to skip before the exact join the data
rows no equality delete key can match.

An equality delete names a few keys; most data rows match none. Staging every data row's key for the
exact (spilling) join cost the 20M-row benchmark table 1.9 GB of keys and most of its time. The delete
keys' fingerprints (4 bytes each) are collected first; a data row is staged only when its fingerprint is
among them. Equal keys have equal fingerprints (the digest of :func:`~.equality.key_text_sql`, the same
text on both sides), so no match is lost; the exact join then compares the keys themselves, so a
fingerprint collision costs a staged row, never a wrong delete. Float and double keys are not
fingerprinted (``-0.0`` equals ``0.0`` but prints differently): their rows are all staged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa
    from pyiceberg.types import NestedField

__all__ = ["FINGERPRINT_BYTES", "Fingerprinter", "KeyFilter", "fingerprintable", "keep_candidates"]

#: bytes one delete key's fingerprint costs in memory
FINGERPRINT_BYTES = 4


def fingerprintable(key_fields: Sequence[NestedField]) -> bool:
    """Whether equal keys of these fields always print the same (no float or double among them)."""
    from pyiceberg.types import DoubleType, FloatType

    return not any(isinstance(f.field_type, (FloatType, DoubleType)) for f in key_fields)


class Fingerprinter:
    """Fingerprints of the key columns of record batches (DataFusion's blake3, the first 4 bytes)."""

    def __init__(self, ids: Sequence[int], key_fields: Sequence[NestedField]) -> None:
        from datafusion import SessionConfig, SessionContext

        from airflow_provider_iceberg_exec.engine.deletes.equality import key_column, key_text_sql

        self._columns = [key_column(i) for i in ids]
        self._sql = f"SELECT digest({key_text_sql(ids, key_fields)}, 'blake3') AS h FROM keys"
        # One partition: the digests must come back in the rows' order (more would repartition them).
        self._ctx = SessionContext(SessionConfig().with_target_partitions(1))

    def of(self, batch: pa.RecordBatch) -> npt.NDArray[np.uint32]:
        """One fingerprint per row of ``batch`` (which holds the key columns under their hidden names)."""
        import numpy as np

        if not batch.num_rows:
            return np.empty(0, dtype=np.uint32)
        self._ctx.register_record_batches("keys", [[batch.select(self._columns)]])
        try:
            parts = [_first_word(b.column(0)) for b in self._ctx.sql(self._sql).collect() if b.num_rows]
        finally:
            self._ctx.deregister_table("keys")
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint32)


def _first_word(digests: pa.Array) -> npt.NDArray[np.uint32]:
    """The first 4 bytes of each (non-null, 32-byte) digest, little-endian."""
    import numpy as np

    offsets = np.frombuffer(digests.buffers()[1], dtype=np.int32)[
        digests.offset : digests.offset + len(digests)
    ]
    data = np.frombuffer(digests.buffers()[2], dtype=np.uint8)
    word = np.zeros(len(offsets), dtype=np.uint32)
    for shift in range(FINGERPRINT_BYTES):
        word |= data[offsets + shift].astype(np.uint32) << np.uint32(8 * shift)
    return word


def keep_candidates(
    fingerprints: npt.NDArray[np.uint32], deleted: npt.NDArray[np.uint32]
) -> npt.NDArray[np.bool_]:
    """Which ``fingerprints`` are among the sorted, unique ``deleted`` ones."""
    import numpy as np

    if not len(deleted):
        return np.zeros(len(fingerprints), dtype=bool)
    at = np.minimum(np.searchsorted(deleted, fingerprints), len(deleted) - 1)
    found: npt.NDArray[np.bool_] = deleted[at] == fingerprints
    return found


class KeyFilter:
    """The delete keys' fingerprints, then the data rows that may match one of them.

    Off (every data row a candidate) for float or double keys, or when the delete keys' fingerprints
    would take more than ``budget_bytes``.
    """

    def __init__(
        self, ids: Sequence[int], key_fields: Sequence[NestedField], delete_rows: int, budget_bytes: int
    ) -> None:
        on = fingerprintable(key_fields) and delete_rows * FINGERPRINT_BYTES <= budget_bytes
        self._fingerprinter = Fingerprinter(ids, key_fields) if on else None
        self._parts: list[npt.NDArray[np.uint32]] = []
        self._deleted: npt.NDArray[np.uint32] | None = None

    def add_deletes(self, batch: pa.RecordBatch) -> None:
        """Take the fingerprints of a batch of delete keys (before any :meth:`candidates`)."""
        if self._fingerprinter is not None:
            self._parts.append(self._fingerprinter.of(batch))

    def candidates(self, batch: pa.RecordBatch) -> npt.NDArray[np.bool_] | None:
        """Which rows of a batch of data keys may match a delete key; ``None`` when the filter is off."""
        import numpy as np

        if self._fingerprinter is None:
            return None
        if self._deleted is None:
            self._deleted = np.unique(np.concatenate(self._parts)) if self._parts else np.empty(0, np.uint32)
            self._parts = []
        return keep_candidates(self._fingerprinter.of(batch), self._deleted)

"""What the commit of a v3 position-delete rewrite proves about a result's DVs, at the base snapshot.

The result is trusted for nothing: each added file must be a DV of a data file live at the base; its
positions must be exactly those every position delete that applied to that data file held (old DV and
position files alike: a DV replaces them all for readers, so one position more loses a live row, one
less brings a deleted row back); and every removed file must leave no data file without its positions
(a removed file that held a position of a data file without a new DV would bring that row back).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from airflow_provider_iceberg_exec.engine.commit.change import file_identity
from airflow_provider_iceberg_exec.engine.deletes.positions import read_position_deletes
from airflow_provider_iceberg_exec.engine.deletes.vectors import is_deletion_vector, read_deletion_vector
from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError
from airflow_provider_iceberg_exec.engine.meta.manifests import referenced_data_file

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

    from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete, ScannedFile, SnapshotFiles

__all__ = ["prove_dvs"]


def prove_dvs(
    table: Table, base: SnapshotFiles, removed: Sequence[DataFile], added: Sequence[DataFile], group_id: str
) -> tuple[DataFile, ...]:
    """Prove one group's DVs and removals at the base; return the data files the DVs name.

    :raises DataFileCodecError: when a claim does not hold; nothing is committed.
    """
    import numpy as np

    live = {scanned.data_file.file_path: scanned for scanned in base.data_files}
    targets: dict[str, ScannedFile] = {}
    for dv in added:
        target = referenced_data_file(dv) if is_deletion_vector(dv) else None
        scanned = live.get(target) if target is not None else None
        if target is None or scanned is None or target in targets:
            raise DataFileCodecError(
                f"group {group_id}: {dv.file_path} is not the one DV of a data file live at the base; "
                "nothing committed"
            )
        targets[target] = scanned
        expected = _applied_positions(table, scanned, scanned.delete_files)
        if not np.array_equal(read_deletion_vector(table.io, dv), expected):
            raise DataFileCodecError(
                f"group {group_id}: the DV of {target} does not hold exactly the positions deleted at the "
                "base; nothing committed"
            )
    removed_ids = {file_identity(f) for f in removed}
    for path, scanned in live.items():
        if path in targets:
            continue
        gone = [d for d in scanned.delete_files if file_identity(d.data_file) in removed_ids]
        if gone and len(_applied_positions(table, scanned, gone)):
            raise DataFileCodecError(
                f"group {group_id}: removing {gone[0].data_file.file_path} would bring back rows of {path}, "
                "which gets no DV; nothing committed"
            )
    return tuple(scanned.data_file for scanned in targets.values())


def _applied_positions(
    table: Table, scanned: ScannedFile, deletes: Sequence[ScannedDelete]
) -> npt.NDArray[np.int64]:
    """The sorted positions of ``scanned`` that its position deletes among ``deletes`` hold, as readers
    apply them."""
    import numpy as np
    from pyiceberg.manifest import DataFileContent

    path = scanned.data_file.file_path
    parts = [np.empty(0, dtype=np.int64)]
    # With a DV, readers ignore the data file's position files (spec, "Scan Planning").
    has_dv = any(is_deletion_vector(d.data_file) for d in scanned.delete_files)
    for delete in deletes:
        delete_file = delete.data_file
        if delete_file.content != DataFileContent.POSITION_DELETES:
            continue
        if has_dv and not is_deletion_vector(delete_file):
            continue
        if is_deletion_vector(delete_file):
            parts.append(read_deletion_vector(table.io, delete_file))
        else:
            parts.append(read_position_deletes(table.io, delete_file, path))
    return np.unique(np.concatenate(parts))

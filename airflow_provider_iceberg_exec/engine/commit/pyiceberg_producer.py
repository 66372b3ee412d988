"""The one module of the commits that relies on PyIceberg's private commit API (PyIceberg 0.12).

PyIceberg 0.12 has no ``replace`` producer, cannot give added files an explicit data sequence number and
cannot write delete manifests, so the commits bring their own snapshot producer, :class:`FilesProducer`.
It subclasses PyIceberg's private ``_SnapshotProducer``, reusing its manifest-list writing, snapshot and
ref updates and its bookkeeping of written manifests, and overrides its hooks:

- ``_commit``: plans and validates the attempt (:func:`~.attempt.prepare_attempt`, which writes the
  filtered copies of the head's manifests) against the transaction's metadata, on every attempt, then
  lets PyIceberg write the manifest list;
- ``_manifests``: the manifests of :meth:`~.attempt.Attempt.write_manifests`;
- ``_summary``: :func:`~.summary.snapshot_summary_properties` (PyIceberg's ``update_snapshot_summaries``
  refuses ``replace``);
- ``_validate_concurrency``: nothing (validation is ours, in ``_commit``), and ``_deleted_entries`` /
  ``_existing_manifests`` (abstract) from the attempt.

It reads the producer's ``_transaction``, ``_io``, ``_snapshot_id``, ``_parent_snapshot_id`` (the branch
head, refreshed by ``_refresh_for_retry`` before each retry), ``_operation`` and ``_compression``, writes
through ``new_manifest_output`` (which records written manifests for cleanup), sets
``_starting_snapshot_id`` (read by ``Transaction`` to resolve a commit window we do not use) and calls
``_clean_all_uncommitted``. :func:`apply_updates` stages metadata updates PyIceberg has no builder for
through ``Transaction._apply``.

Retries are PyIceberg's: ``Transaction.commit_transaction`` retries ``CommitFailedException`` with the
table's ``commit.retry.*`` properties (exponential backoff), refreshes the table and calls the producer's
``_commit`` again. On ``CommitFailedException`` and ``ValidationException`` it deletes the manifests we
wrote; after an unknown outcome it deletes nothing.

:class:`ManifestsProducer` (Java's ``RewriteManifests``) uses the same hooks, plans each attempt with
:func:`~.manifest_attempt.prepare_manifests_attempt`, and appends the ``optimized-m-<uuid>.avro``
manifests it names itself to ``_written_manifests``, so that PyIceberg's cleanup deletes them too.

Format version 3 (PyIceberg 0.12 cannot write it): on a v3 table both producers' ``_commit`` is
:func:`_commit_v3`, PyIceberg's ``_commit`` with our manifest list
(:func:`~.meta.row_ids.write_manifest_list_v3`, every data manifest given a ``first_row_id``) and a
snapshot with ``first-row-id`` = the table's ``next-row-id`` and ``added-rows`` = the row-id range
assigned, recomputed on every attempt. It names the list with the private
``_new_manifest_list_file_name``, records it in ``_written_manifest_lists`` and reads ``_target_branch``,
``_snapshot_id`` and ``commit_uuid``. The catalog's metadata file is written by :func:`v3_metadata_writer`
(``TableMetadataV3.model_dump_json`` refuses), which replaces the private ``_write_metadata`` of that one
catalog object for the length of our commit.

tests/unit/engine/test_pyiceberg_private_api.py checks every one of these names against the installed
PyIceberg, and that no other engine module but :mod:`~.io.pyiceberg_internals` uses a private one.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyiceberg.io import FileIO, OutputFile
from pyiceberg.manifest import ManifestContent, ManifestEntry, ManifestFile, ManifestWriter
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    SetSnapshotRefUpdate,
    TableUpdate,
    UpdatesAndRequirements,
)
from pyiceberg.table.update.snapshot import _new_manifest_list_file_name, _SnapshotProducer
from pyiceberg.typedef import EMPTY_DICT

from airflow_provider_iceberg_exec.engine.commit.attempt import Attempt, prepare_attempt
from airflow_provider_iceberg_exec.engine.commit.change import FilesChange
from airflow_provider_iceberg_exec.engine.commit.manifest_attempt import (
    ManifestsAttempt,
    PlanManifests,
    prepare_manifests_attempt,
)
from airflow_provider_iceberg_exec.engine.meta.manifests import new_manifest_writer
from airflow_provider_iceberg_exec.engine.meta.row_ids import write_manifest_list_v3
from airflow_provider_iceberg_exec.engine.meta.table_metadata import write_table_metadata

__all__ = [
    "FilesProducer",
    "ManifestsProducer",
    "StagedFiles",
    "StagedManifests",
    "apply_updates",
    "stage_files",
    "stage_manifests",
    "v3_metadata_writer",
]


class FilesProducer(_SnapshotProducer["FilesProducer"]):
    """A snapshot producer that removes and adds files, validated from a base snapshot on every attempt.

    Java's ``BaseRewriteFiles`` and ``BaseOverwriteFiles`` on PyIceberg's private ``_SnapshotProducer``;
    what it removes, adds and checks is the plain :class:`~.change.FilesChange`.
    """

    def __init__(
        self, transaction: Transaction, table: Table, change: FilesChange, snapshot_properties: dict[str, str]
    ) -> None:
        super().__init__(
            operation=change.operation,
            transaction=transaction,
            io=table.io,
            snapshot_properties=snapshot_properties,
            branch=change.branch,
        )
        # Validation is ours, from the base snapshot, in _commit. None keeps Transaction's CommitWindow
        # lookup from failing on its own terms (it would look up the head this producer started from).
        self._starting_snapshot_id = None
        self._change = change
        self._attempt: Attempt | None = None

    # -- hooks of _SnapshotProducer -------------------------------------------------------------------

    def _validate_concurrency(self) -> None:
        """Do nothing: :meth:`_commit` validates from the base snapshot on every attempt."""

    def _commit(self) -> UpdatesAndRequirements:
        metadata = self._transaction.table_metadata
        self._attempt = prepare_attempt(
            self._change,
            self._io,
            metadata,
            self._parent_snapshot_id,
            self._snapshot_id,
            lambda content, spec_id: self._new_writer(metadata, content, spec_id),
        )
        if self._attempt.metadata.format_version >= 3:
            return _commit_v3(self, self._attempt.metadata)
        return super()._commit()

    def _deleted_entries(self) -> list[ManifestEntry]:
        # Unused (our _manifests and _summary replace its callers), but abstract in PyIceberg.
        return list(self._current_attempt().removed_entries(self._io))

    def _existing_manifests(self) -> list[ManifestFile]:
        return list(self._current_attempt().carried)

    def _manifests(self) -> list[ManifestFile]:
        metadata = self._current_attempt().metadata
        return self._current_attempt().write_manifests(
            self._io,
            self._change,
            self._snapshot_id,
            lambda content, spec_id: self._new_writer(metadata, content, spec_id),
        )

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        attempt = self._current_attempt()
        metadata = attempt.metadata
        parent = (
            metadata.snapshot_by_id(self._parent_snapshot_id)
            if self._parent_snapshot_id is not None
            else None
        )
        counts = attempt.removed_counts.copy()
        for data_file in self._change.added_files:
            counts.add(data_file)
        properties = counts.properties(
            parent.summary.additional_properties if parent is not None and parent.summary else None,
            snapshot_properties,
        )
        return Summary(operation=self._operation, **properties)

    # -- ours -----------------------------------------------------------------------------------------

    def _current_attempt(self) -> Attempt:
        if self._attempt is None:  # pragma: no cover - _commit always plans first
            raise RuntimeError("no commit attempt planned")
        return self._attempt

    def _new_writer(self, metadata: TableMetadata, content: ManifestContent, spec_id: int) -> ManifestWriter:
        return new_manifest_writer(
            format_version=metadata.format_version,
            content=content,
            spec=metadata.specs()[spec_id],
            schema=metadata.schema(),
            output_file=self.new_manifest_output(),
            snapshot_id=self._snapshot_id,
            avro_compression=self._compression,
        )


@dataclass(frozen=True)
class StagedFiles:
    """A transaction with a :class:`FilesProducer` in it, nothing written yet."""

    transaction: Transaction
    producer: FilesProducer

    def commit(self) -> int:
        """Validate, write the manifests, and commit through PyIceberg's retry loop; return the snapshot id.

        :raises AlreadyCommittedError: when a snapshot with the commit id appeared (see :mod:`.attempt`).
        """
        try:
            self.producer.commit()  # first attempt: validate, write manifests, stage the snapshot
        except BaseException:
            # Nothing has reached the catalog yet, so whatever this attempt wrote is unreferenced.
            self.producer._clean_all_uncommitted()
            raise
        with v3_metadata_writer(self.transaction):
            self.transaction.commit_transaction()  # catalog commit, with PyIceberg's retry loop
        return self.producer.snapshot_id


def stage_files(table: Table, change: FilesChange, snapshot_properties: dict[str, str]) -> StagedFiles:
    """A new transaction on ``table`` with the producer of ``change`` (reads nothing, writes nothing)."""
    transaction = table.transaction()
    return StagedFiles(transaction, FilesProducer(transaction, table, change, snapshot_properties))


def apply_updates(transaction: Transaction, updates: tuple[TableUpdate, ...]) -> None:
    """Stage metadata updates PyIceberg has no builder for (``RemovePartitionStatisticsUpdate``, say).

    Through the private ``Transaction._apply``, which checks and applies them to the staged metadata.
    """
    transaction._apply(updates)


class ManifestsProducer(_SnapshotProducer["ManifestsProducer"]):
    """A ``replace`` snapshot that swaps manifests for rewritten ones, no data change: Java's
    ``BaseRewriteManifests`` on PyIceberg's private ``_SnapshotProducer``.

    Each attempt plans and writes at the branch head (:func:`~.manifest_attempt.prepare_manifests_attempt`),
    so a retry after a concurrent commit re-plans from the new head. New manifests are named
    ``optimized-m-<uuid>.avro`` in the metadata location, as Spark's action names them, and are recorded in
    ``_written_manifests``, so that PyIceberg's cleanup deletes those of a failed attempt.
    """

    def __init__(
        self,
        transaction: Transaction,
        table: Table,
        plan: PlanManifests,
        *,
        commit_id: str,
        branch: str,
        snapshot_properties: dict[str, str],
    ) -> None:
        super().__init__(
            operation=Operation.REPLACE,
            transaction=transaction,
            io=table.io,
            snapshot_properties=snapshot_properties,
            branch=branch,
        )
        self._starting_snapshot_id = None  # validation is ours, see FilesProducer
        self._plan = plan
        self._commit_id = commit_id
        self._branch = branch
        self._location_provider = table.location_provider()
        self._attempt: ManifestsAttempt | None = None

    def _validate_concurrency(self) -> None:
        """Do nothing: :meth:`_commit` plans and validates at the head on every attempt."""

    def _commit(self) -> UpdatesAndRequirements:
        self._attempt = prepare_manifests_attempt(
            self._plan,
            io=self._io,
            metadata=self._transaction.table_metadata,
            branch=self._branch,
            head_snapshot_id=self._parent_snapshot_id,
            commit_id=self._commit_id,
            open_writer=self._new_writer,
        )
        metadata = self._transaction.table_metadata
        if metadata.format_version >= 3:
            return _commit_v3(self, metadata)
        return super()._commit()

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []

    def _existing_manifests(self) -> list[ManifestFile]:
        return list(self.attempt.kept)

    def _manifests(self) -> list[ManifestFile]:
        return self.attempt.manifests

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        return Summary(operation=self._operation, **self.attempt.summary_properties(snapshot_properties))

    @property
    def attempt(self) -> ManifestsAttempt:
        """The last attempt planned."""
        if self._attempt is None:  # pragma: no cover - _commit always plans first
            raise RuntimeError("no manifest rewrite attempt planned")
        return self._attempt

    def _new_output(self) -> OutputFile:
        path = self._location_provider.new_metadata_location(f"optimized-m-{uuid.uuid4()}.avro")
        self._written_manifests.append(path)
        return self._io.new_output(path)

    def _new_writer(self, content: ManifestContent, spec_id: int) -> ManifestWriter:
        metadata = self._transaction.table_metadata
        return new_manifest_writer(
            format_version=metadata.format_version,
            content=content,
            spec=metadata.specs()[spec_id],
            schema=metadata.schema(),
            output_file=self._new_output(),
            snapshot_id=self._snapshot_id,
            avro_compression=self._compression,
        )


@dataclass(frozen=True)
class StagedManifests:
    """A transaction with a :class:`ManifestsProducer` in it, nothing written yet."""

    transaction: Transaction
    producer: ManifestsProducer

    def commit(self) -> ManifestsAttempt:
        """Plan, write and commit through PyIceberg's retry loop; return the attempt that committed.

        :raises AlreadyCommittedError: when a snapshot with the commit id appeared.
        :raises NothingToRewriteError: when there is nothing to rewrite at the head.
        """
        try:
            self.producer.commit()  # first attempt: plan, write, validate, stage the snapshot
        except BaseException:
            self.producer._clean_all_uncommitted()
            raise
        with v3_metadata_writer(self.transaction):
            self.transaction.commit_transaction()
        return self.producer.attempt


def stage_manifests(
    table: Table,
    plan: PlanManifests,
    *,
    commit_id: str,
    branch: str,
    snapshot_properties: dict[str, str],
) -> StagedManifests:
    """A new transaction on ``table`` with the producer of a manifest rewrite (reads and writes nothing)."""
    transaction = table.transaction()
    producer = ManifestsProducer(
        transaction,
        table,
        plan,
        commit_id=commit_id,
        branch=branch,
        snapshot_properties=snapshot_properties,
    )
    return StagedManifests(transaction, producer)


def _commit_v3(producer: _SnapshotProducer[Any], metadata: TableMetadata) -> UpdatesAndRequirements:
    """PyIceberg's ``_SnapshotProducer._commit`` for a format-version 3 table, Java 1.10's way.

    The snapshot's ``first-row-id`` is the table's ``next-row-id`` of this attempt's metadata, and
    ``added-rows`` the size of the row-id range the manifest list assigned (Java's ``SnapshotProducer``),
    so a retry against refreshed metadata recomputes both.
    """
    first_row_id = _next_row_id(metadata)
    new_manifests = producer._manifests()
    sequence_number = metadata.next_sequence_number()
    summary = producer._summary(producer.snapshot_properties)
    file_name = _new_manifest_list_file_name(
        snapshot_id=producer._snapshot_id, attempt=0, commit_uuid=producer.commit_uuid
    )
    list_path = producer._transaction._table.location_provider().new_metadata_location(file_name)
    producer._written_manifest_lists.append(list_path)
    next_row_id = write_manifest_list_v3(
        producer._io.new_output(list_path),
        new_manifests,
        snapshot_id=producer._snapshot_id,
        parent_snapshot_id=producer._parent_snapshot_id,
        sequence_number=sequence_number,
        first_row_id=first_row_id,
        avro_compression=producer._compression,
    )
    # By alias, as the models declare them (PyIceberg's _commit passes field names).
    snapshot = Snapshot.model_validate(
        {
            "snapshot-id": producer._snapshot_id,
            "parent-snapshot-id": producer._parent_snapshot_id,
            "manifest-list": list_path,
            "sequence-number": sequence_number,
            "summary": summary,
            "schema-id": metadata.current_schema_id,
            "first-row-id": first_row_id,
            "added-rows": next_row_id - first_row_id,
        }
    )
    branch = producer._target_branch
    if branch is None:  # pragma: no cover - our commits always name a branch
        return (AddSnapshotUpdate(snapshot=snapshot),), ()
    ref = metadata.refs.get(branch)
    set_ref = SetSnapshotRefUpdate.model_validate(
        {"ref-name": branch, "type": SnapshotRefType.BRANCH, "snapshot-id": producer._snapshot_id}
    )
    assert_ref = AssertRefSnapshotId.model_validate(
        {"ref": branch, "snapshot-id": ref.snapshot_id if ref is not None else None}
    )
    return (AddSnapshotUpdate(snapshot=snapshot), set_ref), (assert_ref,)


def _next_row_id(metadata: TableMetadata) -> int:
    value = getattr(metadata, "next_row_id", None)
    if not isinstance(value, int):
        # Java requires next-row-id in v3 metadata (TableMetadataParser); PyIceberg would set it to None.
        raise ValueError("format-version 3 table metadata without next-row-id; table left unchanged")
    return value


#: catalog objects whose ``_write_metadata`` is ours, with how many commits are using it (threads may share
#: a catalog): the first installs it, the last puts back what was there.
_PATCHED: dict[int, tuple[int, Any]] = {}
_PATCH_LOCK = threading.Lock()
_ABSENT = object()


@contextlib.contextmanager
def v3_metadata_writer(transaction: Transaction) -> Iterator[None]:
    """While our commit runs, let the table's catalog write format-version 3 metadata files.

    Catalogs that write the metadata file themselves (SQL, Glue, Hive) call their static
    ``_write_metadata``, which serialises with ``TableMetadataV3.model_dump_json`` and so raises for v3.
    For the length of the commit this one catalog object writes through
    :func:`~.meta.table_metadata.write_table_metadata` instead (identical output for v1 and v2); nothing
    changes for other catalog objects or classes, and a REST catalog, which gets the updates, never
    calls it.
    """
    catalog = transaction._table.catalog
    if transaction.table_metadata.format_version < 3 or not hasattr(catalog, "_write_metadata"):
        yield
        return
    key = id(catalog)
    with _PATCH_LOCK:
        users, previous = _PATCHED.get(key, (0, vars(catalog).get("_write_metadata", _ABSENT)))
        if users == 0:
            catalog._write_metadata = _write_metadata
        _PATCHED[key] = (users + 1, previous)
    try:
        yield
    finally:
        with _PATCH_LOCK:
            users, previous = _PATCHED.pop(key)
            if users > 1:
                _PATCHED[key] = (users - 1, previous)
            elif previous is _ABSENT:
                del catalog._write_metadata
            else:
                catalog._write_metadata = previous


def _write_metadata(metadata: TableMetadata, io: FileIO, metadata_path: str) -> None:
    write_table_metadata(metadata, io.new_output(metadata_path))

"""Spark's ``rewrite_manifests``: check the arguments, then commit the rewrite planned at the head."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata

from airflow_provider_iceberg_exec.engine.commit.manifests import (
    ManifestRewriteOutcome,
    check_manifest_rewrite_table,
    commit_manifest_rewrite,
)
from airflow_provider_iceberg_exec.engine.contracts import REWRITE_MANIFESTS_RESULT, RewriteManifestsResult
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, TableNotFoundError
from airflow_provider_iceberg_exec.engine.io.catalog import catalog_errors, table_name
from airflow_provider_iceberg_exec.engine.ops.manifests.plan import (
    DEFAULT_TARGET_SIZE_BYTES,
    TARGET_SIZE_PROPERTY,
)
from airflow_provider_iceberg_exec.engine.ops.manifests.rewrite import RewriteSettings, rewrite_at_head

__all__ = ["rewrite_manifests"]


def rewrite_manifests(
    table: Table,
    *,
    spec_id: int | None = None,
    sort_by: Sequence[str] | None = None,
    target_size_bytes: int | None = None,
    commit_id: str | None = None,
    branch: str = "main",
    snapshot_properties: Mapping[str, str] | None = None,
) -> RewriteManifestsResult:
    """Rewrite the manifests of one partition spec into fewer, clustered ones: Spark's ``rewrite_manifests``.

    The live entries of the head's data manifests of ``spec_id`` are rewritten into
    ``ceil(total manifest bytes / target)`` manifests clustered by partition (or by the ``sort_by``
    partition fields) in range order, each entry EXISTING with its snapshot id and sequence numbers; then
    the delete manifests the same way. One ``replace`` snapshot commits both, validated as Java's
    ``RewriteManifests`` and re-planned at the head on every retry; data is unchanged. Manifests of other
    specs are kept. A single manifest that stays one, or no manifest of the spec, is a result with zero
    counts and no commit.

    .. code-block:: python

        result = rewrite_manifests(table, commit_id="nightly-2026-01-01")
        result["rewritten_manifests_count"], result["added_manifests_count"]

    :param table: the table; refreshed first.
    :param spec_id: the partition spec whose manifests are rewritten; default the current spec.
    :param sort_by: partition field names of that spec to cluster by, in order; default all of them.
    :param target_size_bytes: the manifest size aimed at; default the table's
        ``commit.manifest.target-size-bytes`` (8 MiB).
    :param commit_id: the idempotency key; a snapshot that carries it is reported, not committed again.
        Default: a random one.
    :param branch: the branch.
    :param snapshot_properties: extra summary properties.
    :returns: the ``iceberg-exec/rewrite-manifests-result@1`` document, with Spark's
        ``rewritten_manifests_count`` and ``added_manifests_count``.
    :raises ConfigurationError: for an unknown spec id or ``sort_by`` field, a bad target size, a tag,
        or a format-version 3 table; the table is unchanged.
    :raises TableNotFoundError: when the table does not exist.
    :raises CommitValidationError: when a rewrite does not match the head it was planned at.
    :raises CommitConflictError: when concurrent commits kept winning until the retries ran out.
    :raises CommitStateUnknownError: when the catalog's answer is unknown.
    """
    name = table_name(table)
    try:
        with catalog_errors(name):
            table.refresh()
    except NoSuchTableError as err:
        raise TableNotFoundError(f"table {name} does not exist") from err
    metadata = table.metadata
    check_manifest_rewrite_table(metadata, branch, name)
    spec = _spec(metadata, spec_id, name)
    settings = RewriteSettings(
        spec_id=spec.spec_id,
        key_positions=_key_positions(spec, sort_by, name),
        target_size_bytes=_target_size(metadata, target_size_bytes),
    )
    outcome = commit_manifest_rewrite(
        table,
        rewrite_at_head(settings),
        commit_id=uuid.uuid4().hex if commit_id is None else commit_id,
        branch=branch,
        snapshot_properties=snapshot_properties,
    )
    return _result(name, branch, settings, list(sort_by or []), outcome)


def _spec(metadata: TableMetadata, spec_id: int | None, name: str) -> PartitionSpec:
    specs = metadata.specs()
    if spec_id is None:
        return specs[metadata.default_spec_id]
    if isinstance(spec_id, bool) or not isinstance(spec_id, int):
        raise ConfigurationError(f"spec_id must be an integer, got {spec_id!r}")
    if spec_id not in specs:
        raise ConfigurationError(f"unknown spec id {spec_id} for {name}; its specs are {sorted(specs)}")
    return specs[spec_id]


def _key_positions(spec: PartitionSpec, sort_by: Sequence[str] | None, name: str) -> tuple[int, ...]:
    names = [field.name for field in spec.fields]
    if sort_by is None:
        return tuple(range(len(names)))
    if isinstance(sort_by, str):
        raise ConfigurationError("sort_by must be a list of partition field names, not a string")
    if not sort_by:
        raise ConfigurationError("sort_by must name at least one partition field")
    if not names:
        raise ConfigurationError(f"cannot sort_by in spec {spec.spec_id} of {name}: it is unpartitioned")
    if unknown := [field for field in sort_by if field not in names]:
        raise ConfigurationError(
            f"sort_by names {', '.join(map(repr, unknown))}, not partition fields of spec {spec.spec_id} "
            f"of {name} ({', '.join(names)})"
        )
    if len(set(sort_by)) != len(sort_by):
        raise ConfigurationError("sort_by names a partition field more than once")
    return tuple(names.index(field) for field in sort_by)


def _target_size(metadata: TableMetadata, target_size_bytes: int | None) -> int:
    if target_size_bytes is None:
        text = metadata.properties.get(TARGET_SIZE_PROPERTY)
        if text is None:
            return DEFAULT_TARGET_SIZE_BYTES
        try:
            target_size_bytes = int(text)
        except ValueError:
            raise ConfigurationError(
                f"table property {TARGET_SIZE_PROPERTY}={text!r} is not an integer"
            ) from None
    if (
        isinstance(target_size_bytes, bool)
        or not isinstance(target_size_bytes, int)
        or target_size_bytes <= 0
    ):
        raise ConfigurationError(f"target_size_bytes must be a positive integer, got {target_size_bytes!r}")
    return target_size_bytes


def _result(
    name: str, branch: str, settings: RewriteSettings, sort_by: list[str], outcome: ManifestRewriteOutcome
) -> RewriteManifestsResult:
    return RewriteManifestsResult(
        schema=REWRITE_MANIFESTS_RESULT,
        table=name,
        branch=branch,
        spec_id=settings.spec_id,
        sort_by=sort_by,
        target_size_bytes=settings.target_size_bytes,
        rewritten_manifests_count=outcome.replaced_manifests,
        added_manifests_count=outcome.created_manifests,
        kept_manifests_count=outcome.kept_manifests,
        rewritten_entries_count=outcome.entries,
        snapshot_ids=[outcome.snapshot_id] if outcome.snapshot_id is not None else [],
        commit_id=outcome.commit_id,
        already_committed=outcome.already_committed,
    )

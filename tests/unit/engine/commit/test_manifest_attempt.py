"""Java's two validations of a manifest rewrite, on plain manifest-list entries."""

from __future__ import annotations

import pytest
from pyiceberg.exceptions import ValidationException
from pyiceberg.manifest import ManifestContent, ManifestFile

from airflow_provider_iceberg_exec.engine.commit.manifest_attempt import (
    ManifestRewrite,
    validate_manifest_rewrite,
)


def _manifest(path: str, added: int | None = 0, existing: int | None = 1) -> ManifestFile:
    return ManifestFile.from_args(
        manifest_path=path,
        manifest_length=100,
        partition_spec_id=0,
        content=ManifestContent.DATA,
        sequence_number=1,
        min_sequence_number=1,
        added_snapshot_id=1,
        added_files_count=added,
        existing_files_count=existing,
        deleted_files_count=0,
    )


def test_a_rewrite_of_head_manifests_with_the_same_file_count_passes() -> None:
    head = [_manifest("m1", added=2, existing=0), _manifest("m2", existing=3), _manifest("other")]
    rewrite = ManifestRewrite(replaced=head[:2], created=[_manifest("new", existing=5)], entries=5)
    validate_manifest_rewrite(9, head, rewrite)


def test_a_replaced_manifest_missing_from_the_head_fails_with_java_s_message() -> None:
    rewrite = ManifestRewrite(replaced=[_manifest("gone")], created=[_manifest("new")], entries=1)
    with pytest.raises(
        ValidationException, match="Deleted manifest gone could not be found in the latest snapshot 9"
    ):
        validate_manifest_rewrite(9, [_manifest("m1")], rewrite)


def test_a_different_active_file_count_fails_with_java_s_message() -> None:
    head = [_manifest("m1", existing=2), _manifest("m2", existing=2)]
    rewrite = ManifestRewrite(replaced=head, created=[_manifest("new", existing=3)], entries=3)
    with pytest.raises(
        ValidationException,
        match=r"Replaced and created manifests must have the same number of active files: "
        r"3 \(new\), 4 \(old\)",
    ):
        validate_manifest_rewrite(9, head, rewrite)


def test_a_manifest_without_file_counts_fails() -> None:
    head = [_manifest("m1", existing=None)]
    rewrite = ManifestRewrite(replaced=head, created=[_manifest("new")], entries=1)
    with pytest.raises(ValidationException, match="No file counts in manifest: m1"):
        validate_manifest_rewrite(9, head, rewrite)

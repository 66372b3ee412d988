"""Integration fixtures: the real services (SeaweedFS S3, PostgreSQL) started once per session."""

from __future__ import annotations

from tests.integration.services import postgres_server, seaweedfs_server

__all__ = ["postgres_server", "seaweedfs_server"]

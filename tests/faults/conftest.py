"""Fixtures of the fault-injection tests: real services, some of which the tests kill and restart.

- ``postgres_server`` (session): the PostgreSQL of the integration tests (tests/integration/services.py).
- ``airflow_db`` (session): the migrated Airflow metadata DB of the system tests (tests/system/conftest.py).
- ``s3_service`` (module): a SeaweedFS the tests may kill (``SIGKILL``) and start again in place
  (:class:`tests.faults.services.RestartableSeaweedFS`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.services import RestartableSeaweedFS, ServiceError, restartable_seaweedfs
from tests.integration.services import postgres_server
from tests.system.conftest import airflow_db

__all__ = ["airflow_db", "postgres_server", "s3_service"]


@pytest.fixture(scope="module")
def s3_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestartableSeaweedFS]:
    """A SeaweedFS for the module that tests may kill; call its ``start()`` to bring it back."""
    try:
        context = restartable_seaweedfs(tmp_path_factory.mktemp("seaweedfs-faults"))
        service = context.__enter__()
    except ServiceError as err:
        pytest.fail(str(err), pytrace=False)
    try:
        yield service
    finally:
        context.__exit__(None, None, None)

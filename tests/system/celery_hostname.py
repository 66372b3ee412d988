"""``[core] hostname_callable`` of the CeleryExecutor system test's workers.

Both workers run on this machine, so the FQDN would not tell them apart in ``task_instance.hostname``;
each worker's environment names it instead.
"""

from __future__ import annotations

import os

#: the environment variable that names the worker
WORKER_NAME_ENV = "ICEBERG_EXEC_TEST_WORKER_NAME"


def worker_hostname() -> str:
    """The name of the worker this task runs on (``ICEBERG_EXEC_TEST_WORKER_NAME``)."""
    return os.environ[WORKER_NAME_ENV]

"""The Airflow names that moved inside the supported range (``apache-airflow>=3.1.2,<3.4``).

Airflow 3.2 (Task SDK 1.2) gave ``conf``, ``AirflowFailException``, the listener manager and
``amask_secret`` a home in ``airflow.sdk``; Airflow 3.1 has them in the core packages (and no async
``amask_secret``: its ``mask_secret`` is safe in async code). Each name is taken from the Task SDK where
it is there, else from its 3.1 home. Airflow 3.2 also made ``retry_exponential_backoff`` a multiplier
(3.1: a flag that doubles the delay at each retry). ``bash .ci/run`` proves both ends: the main suite
on the newest Airflow, the ``compat`` tests on the oldest (docs/deployment.md).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk import conf
    from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

    AIRFLOW_3_1 = False
else:
    try:
        from airflow.sdk import conf
        from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

        AIRFLOW_3_1 = False
    except ImportError:  # Airflow 3.1
        from airflow.configuration import conf
        from airflow.exceptions import AirflowFailException, TaskDeferred

        AIRFLOW_3_1 = True

__all__ = [
    "AIRFLOW_3_1",
    "AirflowFailException",
    "TaskDeferred",
    "alias_event_extra",
    "amask_secret",
    "conf",
    "get_listener_manager",
    "retry_exponential_backoff",
]


def get_listener_manager() -> Any:
    """The listener manager whose hooks the task runner calls (``dag.test()`` included)."""
    try:
        from airflow.sdk.listener import get_listener_manager as manager
    except ImportError:  # Airflow 3.1: the task runner calls the core's manager
        from airflow.listeners.listener import get_listener_manager as manager  # type: ignore[assignment]
    return manager()


async def amask_secret(secret: str) -> None:
    """Mask ``secret`` in this process's logs and the supervisor's, from async code (a trigger)."""
    try:
        from airflow.sdk.log import amask_secret as mask
    except ImportError:  # Airflow 3.1: the synchronous one sends without awaiting a reply
        from airflow.sdk.log import mask_secret

        mask_secret(secret)
        return
    await mask(secret)


def retry_exponential_backoff(multiplier: float) -> float | bool:
    """``multiplier`` as the installed BaseOperator takes ``retry_exponential_backoff``: itself on Airflow
    3.2+, on 3.1 (whose default is ``False``) the flag, any non-zero value doubling the delay per retry."""
    from airflow.sdk import BaseOperator

    default = inspect.signature(BaseOperator.__init__).parameters["retry_exponential_backoff"].default
    return bool(multiplier) if isinstance(default, bool) else multiplier


def alias_event_extra(extra: dict[str, Any]) -> dict[str, Any]:
    """An asset alias event's extra as the installed Airflow stores it: Airflow 3.1 hashes its items
    (``frozenset(extra.items())``) and fails the task, after its commit landed, on a list value; there
    a list travels as its items joined by commas."""
    if not AIRFLOW_3_1:
        return extra
    return {k: ",".join(map(str, v)) if isinstance(v, list) else v for k, v in extra.items()}

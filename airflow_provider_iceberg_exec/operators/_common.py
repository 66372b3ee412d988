"""Helpers shared by the operators and sensors: error mapping, commit ids, assets, payload names, pools.

The one place where engine exceptions become Airflow exceptions is :func:`engine_errors`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow_provider_iceberg_exec import settings
from airflow_provider_iceberg_exec.hooks.iceberg_exec import IcebergExecHook

if TYPE_CHECKING:
    from airflow.sdk import Asset, BaseOperator

    from airflow_provider_iceberg_exec.engine.config import ResourceLimits

__all__ = [
    "ASSET_ALIAS",
    "CatalogHookMixin",
    "commit_id_from_context",
    "commit_task_arguments",
    "engine_errors",
    "normalize_options",
    "one_line",
    "optional_text",
    "payload_name",
    "payload_threshold",
    "pool_arguments",
    "scope_arguments",
    "table_asset",
    "table_asset_uri",
    "task_commit_id",
    "warn_pool_slots",
    "with_asset_alias",
]

#: the asset alias every commit emits its table's asset through, so that tables known only at run time
#: (a templated ``table``) still produce asset events
ASSET_ALIAS = "iceberg-exec-commits"


def one_line(err: BaseException) -> str:
    """The first line of ``err``'s message, prefixed by its class name."""
    text = str(err).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


class PoolDefaultsPartial:
    """``Operator.partial()`` with ``pool`` and ``pool_slots`` defaulting to ``[iceberg_exec]``'s.

    Airflow fills what ``.partial()`` is not given from the ``__init__`` signature, where the heavy
    operators say ``None`` ("the configured default"), and then checks ``pool_slots < 1`` on it: a
    ``.partial(task_id=...)`` without ``pool_slots`` failed when the DAG was parsed.
    """

    def __get__(self, obj: Any, cls: type[Any]) -> Any:
        from airflow.sdk import BaseOperator

        partial = BaseOperator.__dict__["partial"].__get__(obj, cls)
        if obj is not None:
            return partial  # Airflow's refusal of .partial() on a task

        def partial_with_pool_defaults(**kwargs: Any) -> Any:
            if kwargs.get("pool") is None:
                kwargs["pool"] = settings.default_pool()
            if kwargs.get("pool_slots") is None:
                kwargs["pool_slots"] = settings.default_pool_slots()
            return partial(**kwargs)

        return partial_with_pool_defaults


class CatalogHookMixin:
    """An operator's catalog hook, from its ``iceberg_exec_conn_id`` once the templates are rendered."""

    iceberg_exec_conn_id: str

    @cached_property
    def hook(self) -> IcebergExecHook:
        """The catalog hook, built after the templates are rendered."""
        return IcebergExecHook(iceberg_exec_conn_id=self.iceberg_exec_conn_id)


def pool_arguments(
    pool: str | None, pool_slots: int | None, *, default_slots: int | None = None
) -> dict[str, Any]:
    """``BaseOperator``'s ``pool`` and ``pool_slots`` of a heavy task, ``None`` being the configured default.

    The default slots are ``default_slots`` when given, else derived from ``[iceberg_exec] memory_limit``.
    """
    if pool_slots is None:
        pool_slots = settings.default_pool_slots() if default_slots is None else default_slots
    return {"pool": pool if pool is not None else settings.default_pool(), "pool_slots": pool_slots}


def commit_task_arguments(
    kwargs: dict[str, Any],
    *,
    asset_alias: str | None,
    pool: str | None,
    pool_slots: int | None,
    default_slots: int | None = None,
) -> dict[str, Any]:
    """``BaseOperator``'s arguments of a committing task: ``kwargs`` with the asset alias and the pool.

    The alias is added to the task's ``outlets`` (taken out of ``kwargs``), so that the commit's asset
    event has a place to go.
    """
    outlets = with_asset_alias(kwargs.pop("outlets", None), asset_alias)
    return {"outlets": outlets, **pool_arguments(pool, pool_slots, default_slots=default_slots), **kwargs}


def task_commit_id(operator: Any, context: Mapping[str, Any]) -> str:
    """The operator's ``commit_id`` when rendered to text, else the one derived from ``context``."""
    return optional_text(operator.commit_id) or commit_id_from_context(
        context, task_id=operator.task_id, dag_id=operator.dag_id
    )


def payload_threshold(value: int | None) -> int:
    """An operator's ``payload_file_threshold``: ``[iceberg_exec] payload_file_threshold`` when ``None``."""
    return settings.payload_file_threshold() if value is None else int(value)


def warn_pool_slots(operator: BaseOperator, limits: ResourceLimits) -> None:
    """Warn when the memory limit would take more pool slots than the task holds."""
    needed = settings.pool_slots_for(limits.memory_limit_bytes)
    if needed > operator.pool_slots:
        operator.log.warning(
            "Memory limit %s bytes would take %s slots of pool %s but the task holds %s; set pool_slots=%s "
            "so that the pool bounds the memory of concurrent tasks",
            limits.memory_limit_bytes,
            needed,
            operator.pool,
            operator.pool_slots,
            needed,
        )


class TriggerFailedError(Exception):
    """The trigger a deferred sensor waited on ended with an error event (its message is one line)."""


@contextmanager
def engine_errors() -> Iterator[None]:
    """Map engine exceptions to Airflow's, in one place: no other module raises an Airflow exception.

    - what a retry cannot fix fails the task without retry, with a one-line reason
      (``AirflowFailException``): bad input or a failed validation (``ConfigurationError``,
      ``TableNotFoundError``, ``DataFileCodecError``, ``CommitValidationError``), a missing or corrupt
      input file (``DataFileReadError``), failed planned tasks (``IncompleteRunError``) and an unknown
      commit state (``CommitStateUnknownError``: check the table first);
    - ``CommitConflictError`` (the table moved; a retry re-validates) and ``CatalogUnavailableError``
      propagate, so that the task's ``retries`` with exponential backoff apply;
    - a trigger's error event (``TriggerFailedError``) fails the try (``AirflowException``; retries apply);
    - anything else propagates unchanged.
    """
    from airflow.sdk.exceptions import AirflowException

    from airflow_provider_iceberg_exec.compat import AirflowFailException
    from airflow_provider_iceberg_exec.engine.errors import (
        CommitStateUnknownError,
        CommitValidationError,
        ConfigurationError,
        DataFileCodecError,
        DataFileReadError,
        IncompleteRunError,
    )

    try:
        yield
    except (
        ConfigurationError,
        DataFileCodecError,
        DataFileReadError,
        CommitValidationError,
        CommitStateUnknownError,
        IncompleteRunError,
    ) as err:
        raise AirflowFailException(one_line(err)) from err
    except TriggerFailedError as err:
        raise AirflowException(str(err)) from err


def optional_text(value: Any) -> str | None:
    """``None`` for ``None``, an empty or blank string, or the text ``None`` rendered from a template."""
    if value is None:
        return None
    text = str(value).strip()
    return None if text in ("", "None", "null") else text


def scope_arguments(operator: Any) -> dict[str, Any]:
    """The engine's ``where``, ``options`` and ``branch`` from an operator's rendered fields.

    A blank ``where`` is every row, a blank ``branch`` is ``main``; ``options`` as :func:`normalize_options`.
    """
    return {
        "where": optional_text(operator.where),
        "options": normalize_options(operator.options),
        "branch": optional_text(operator.branch) or "main",
    }


def normalize_options(options: Mapping[str, Any] | str | None) -> dict[str, str]:
    """Rendered ``options`` as the engine's ``{name: str}``, dropping empty values.

    A string is parsed as a JSON object, so ``"{{ params.options | tojson }}"`` works.

    :raises ConfigurationError: when ``options`` is neither a mapping nor a JSON object.
    """
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    if options is None:
        return {}
    if isinstance(options, str):
        if not options.strip():
            return {}
        try:
            options = json.loads(options)
        except ValueError as err:
            raise ConfigurationError(f"options must be a mapping or a JSON object, got {options!r}") from err
    if not isinstance(options, Mapping):
        raise ConfigurationError(f"options must be a mapping, got {type(options).__name__}")
    out: dict[str, str] = {}
    for key, value in options.items():
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        out[str(key)] = ("true" if value else "false") if isinstance(value, bool) else str(value).strip()
    return out


def _ti_attr(context: Mapping[str, Any], name: str) -> Any:
    ti = context.get("ti") or context.get("task_instance")
    return getattr(ti, name, None) if ti is not None else None


def commit_id_from_context(context: Mapping[str, Any], *, task_id: str, dag_id: str | None) -> str:
    """The commit id of a commit task: stable across the task's retries, unique per DAG run and task.

    Derived from the DAG id, the run id, the task id and the map index, never the try number, so that a
    retry after a commit that landed finds it and reports it instead of committing twice.

    :raises ConfigurationError: outside a DAG run (no run id in ``context``); call it inside
        :func:`engine_errors`, which fails the task without retry.
    """
    from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

    dag = _ti_attr(context, "dag_id") or dag_id
    run_id = _ti_attr(context, "run_id") or context.get("run_id")
    if not dag or not run_id:
        raise ConfigurationError("cannot derive a commit id outside a DAG run; pass commit_id explicitly")
    map_index = _ti_attr(context, "map_index")
    suffix = f":{map_index}" if isinstance(map_index, int) and map_index >= 0 else ""
    return f"airflow:{dag}:{run_id}:{task_id}{suffix}"


def payload_name(context: Mapping[str, Any], *, task_id: str, dag_id: str | None, part: str) -> str:
    """A staging file name unique to one task instance and one payload (stable across retries)."""
    dag = _ti_attr(context, "dag_id") or dag_id or "dag"
    run_id = _ti_attr(context, "run_id") or context.get("run_id") or "run"
    map_index = _ti_attr(context, "map_index")
    index = f"__{map_index}" if isinstance(map_index, int) and map_index >= 0 else ""
    return f"{dag}__{run_id}__{task_id}{index}__{part}"


def table_asset_uri(catalog: str, table: str) -> str:
    """``iceberg://<catalog>/<namespace>/<table>``; a nested namespace keeps its dots.

    >>> table_asset_uri("prod", "db.events")
    'iceberg://prod/db/events'
    >>> table_asset_uri("prod", "a.b.events")
    'iceberg://prod/a.b/events'
    """
    namespace, _, name = table.rpartition(".")
    return f"iceberg://{quote(catalog, safe='')}/{quote(namespace, safe='.')}/{quote(name, safe='')}"


def table_asset(catalog: str, table: str) -> Asset:
    """The Airflow asset of a table, to schedule downstream DAGs on its commits.

    :param catalog: the catalog name (the connection's ``catalog_name`` extra, or its id).
    :param table: ``"namespace.table"``.
    """
    from airflow.sdk import Asset

    return Asset(uri=table_asset_uri(catalog, table))


def with_asset_alias(outlets: Any, alias: str | None) -> list[Any]:
    """``outlets`` (a list, one item or ``None``) plus the asset alias ``alias`` when it is not ``None``."""
    from airflow.sdk import AssetAlias

    items = list(outlets) if isinstance(outlets, (list, tuple)) else ([] if outlets is None else [outlets])
    return [*items, AssetAlias(name=alias)] if alias else items

"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point.

A pure dict literal: importing this module must stay free of Airflow, PyIceberg and DataFusion, because
every Airflow component calls it while discovering providers.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_iceberg_exec import __version__

_INTEGRATION = "Apache Iceberg (iceberg-exec)"


def get_provider_info() -> dict[str, Any]:
    """Return the provider's metadata, valid against Airflow's ``provider_info.schema.json``."""
    return {
        "package-name": "airflow-provider-iceberg-exec",
        "name": "Apache Iceberg maintenance (iceberg-exec)",
        "description": (
            "Maintains Apache Iceberg tables (compaction, copy-on-write deletes, equality-delete "
            "resolution, orphan removal, snapshot expiry) with bounded-memory Apache DataFusion "
            "executions inside Airflow tasks."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": _INTEGRATION,
                "external-doc-url": "https://iceberg.apache.org/",
                "tags": ["software"],
            }
        ],
        "hooks": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": ["airflow_provider_iceberg_exec.hooks.iceberg_exec"],
            }
        ],
        "operators": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "airflow_provider_iceberg_exec.operators.compaction",
                    "airflow_provider_iceberg_exec.operators.commit",
                    "airflow_provider_iceberg_exec.operators.convert",
                    "airflow_provider_iceberg_exec.operators.cow",
                    "airflow_provider_iceberg_exec.operators.maintenance",
                    "airflow_provider_iceberg_exec.operators.manifests",
                    "airflow_provider_iceberg_exec.operators.merge",
                    "airflow_provider_iceberg_exec.operators.resolve",
                    "airflow_provider_iceberg_exec.operators.position_deletes",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "airflow_provider_iceberg_exec.sensors.snapshot",
                    "airflow_provider_iceberg_exec.sensors.health",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "airflow_provider_iceberg_exec.triggers.snapshot",
                    "airflow_provider_iceberg_exec.triggers.health",
                ],
            }
        ],
        "connection-types": [
            {
                "connection-type": "iceberg_exec",
                "hook-class-name": "airflow_provider_iceberg_exec.hooks.iceberg_exec.IcebergExecHook",
                "hook-name": "Iceberg catalog (iceberg-exec)",
                "ui-field-behaviour": {
                    "hidden-fields": ["port", "extra"],
                    "relabeling": {
                        "host": "Catalog URI",
                        "schema": "Warehouse",
                        "login": "Client ID",
                        "password": "Client secret or token",
                    },
                    "placeholders": {
                        "host": "http://rest-catalog:8181 or sqlite:////data/catalog.db",
                        "schema": "s3://bucket/warehouse or file:///data/warehouse",
                        "login": "OAuth2 client id (REST catalogs; leave empty for a bearer token)",
                        "password": "OAuth2 client secret, or a bearer token when Client ID is empty",
                        "catalog_type": "rest, sql, hive, glue or dynamodb (inferred from the URI if empty)",
                        "catalog_name": "name used in logs and asset URIs (default: the connection id)",
                        "s3_endpoint": "http://minio:9000",
                        "s3_region": "us-east-1",
                    },
                },
                "conn-fields": {
                    "catalog_type": {
                        "label": "Catalog type",
                        "schema": {
                            "type": ["string", "null"],
                            "enum": ["rest", "sql", "hive", "glue", "dynamodb", None],
                        },
                        "description": "PyIceberg catalog type; inferred from the URI when empty.",
                    },
                    "catalog_name": {
                        "label": "Catalog name",
                        "schema": {"type": ["string", "null"]},
                        "description": "Defaults to the connection id.",
                    },
                    "s3_endpoint": {"label": "S3 endpoint", "schema": {"type": ["string", "null"]}},
                    "s3_region": {"label": "S3 region", "schema": {"type": ["string", "null"]}},
                    "s3_access_key_id": {
                        "label": "S3 access key id",
                        "schema": {"type": ["string", "null"]},
                    },
                    "s3_secret_access_key": {
                        "label": "S3 secret access key",
                        "schema": {"type": ["string", "null"], "format": "password"},
                    },
                    "s3_session_token": {
                        "label": "S3 session token",
                        "schema": {"type": ["string", "null"], "format": "password"},
                    },
                    "s3_path_style_access": {
                        "label": "S3 path-style access",
                        "schema": {"type": ["boolean", "null"], "default": False},
                    },
                },
            }
        ],
        "config": {
            "iceberg_exec": {
                "description": "Deployment defaults of the iceberg-exec operators.",
                "options": {
                    "memory_limit": {
                        "description": (
                            "Memory limit of one bounded execution when the task sets none, with a "
                            "binary unit (KiB, MiB, GiB)."
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "1GiB",
                        "default": "256MiB",
                    },
                    "spill_dir": {
                        "description": (
                            "Directory for spill files of the executions; empty means a directory under "
                            "the system temporary directory."
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/mnt/spill/iceberg-exec",
                        "default": "",
                    },
                    "pool": {
                        "description": (
                            "Airflow pool of the heavy tasks (rewrite, single-task compaction). Size it as "
                            "worker memory in GiB times slots_per_gib to bound the memory of concurrent "
                            "executions."
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "iceberg_exec",
                        "default": "default_pool",
                    },
                    "slots_per_gib": {
                        "description": (
                            "Pool slots a task takes per GiB of its memory limit: "
                            "pool_slots = ceil(memory limit in GiB * slots_per_gib), at least 1."
                        ),
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "8",
                        "default": "4",
                    },
                    "payload_file_threshold": {
                        "description": (
                            "XCom payloads listing more files than this are written as JSON under the "
                            "table's metadata/iceberg-exec-staging/ and XCom carries their URI."
                        ),
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "5000",
                        "default": "1000",
                    },
                },
            }
        },
    }

"""Registration: the provider info is schema-valid, and its connection form agrees with the hook's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from airflow_provider_iceberg_exec.get_provider_info import get_provider_info
from airflow_provider_iceberg_exec.hooks.iceberg_exec import FORM_FIELDS, IcebergExecHook


def _schema() -> dict:
    import airflow

    return json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())


def _connection_type() -> dict:
    (entry,) = get_provider_info()["connection-types"]
    return entry


def test_provider_info_is_valid_against_installed_airflow_schema():
    jsonschema.validate(get_provider_info(), _schema())


def test_ui_field_behaviour_is_valid_for_airflow():
    import airflow

    schema = json.loads(
        (Path(airflow.__file__).parent / "customized_form_field_behaviours.schema.json").read_text()
    )
    jsonschema.validate(IcebergExecHook.get_ui_field_behaviour(), schema)


def test_every_declared_module_and_class_imports():
    import importlib

    info = get_provider_info()
    for kind in ("hooks", "operators", "sensors", "triggers"):
        for entry in info[kind]:
            for module in entry["python-modules"]:
                importlib.import_module(module)
    module, _, name = _connection_type()["hook-class-name"].rpartition(".")
    assert getattr(importlib.import_module(module), name) is IcebergExecHook


def test_connection_type_matches_hook_attributes():
    entry = _connection_type()
    assert entry["connection-type"] == IcebergExecHook.conn_type == "iceberg_exec"
    assert entry["hook-name"] == IcebergExecHook.hook_name
    assert IcebergExecHook.default_conn_name == "iceberg_exec_default"


def test_declared_form_agrees_with_hook_form():
    """Newer cores build the form from provider info, older ones from the hook: both must say the same."""
    entry = _connection_type()
    behaviour = IcebergExecHook.get_ui_field_behaviour()
    declared = entry["ui-field-behaviour"]
    assert declared["hidden-fields"] == behaviour["hidden_fields"]
    assert declared["relabeling"] == behaviour["relabeling"]
    assert declared["placeholders"] == behaviour["placeholders"]

    fields = entry["conn-fields"]
    assert list(fields) == list(IcebergExecHook.CONN_FIELDS) == list(FORM_FIELDS)
    for name, (label, kind) in IcebergExecHook.CONN_FIELDS.items():
        schema = fields[name]["schema"]
        assert fields[name]["label"] == label
        if kind == "password":
            assert schema.get("format") == "password", name
        else:
            assert schema.get("format") != "password", name
            assert ("boolean" if kind == "boolean" else "string") in schema["type"], name


def test_form_widgets_match_declared_fields_when_flask_is_installed():
    pytest.importorskip("flask_appbuilder")
    widgets = IcebergExecHook.get_connection_form_widgets()
    assert list(widgets) == list(get_provider_info()["connection-types"][0]["conn-fields"])


def test_config_section_declares_the_deployment_defaults():
    options = get_provider_info()["config"]["iceberg_exec"]["options"]
    assert {"memory_limit", "spill_dir", "pool", "slots_per_gib", "payload_file_threshold"} <= set(options)


def test_get_provider_info_module_imports_nothing_heavy():
    code = (
        "import sys; import airflow_provider_iceberg_exec.get_provider_info as m; m.get_provider_info(); "
        "bad = [x for x in ('airflow', 'pyarrow', 'pyiceberg', 'datafusion') if x in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_airflow_providers_get_shows_the_provider():
    """``airflow providers get`` finds the package through the apache_airflow_provider entry point."""
    airflow_bin = Path(sys.executable).parent / "airflow"
    done = subprocess.run(
        [str(airflow_bin), "providers", "get", "airflow-provider-iceberg-exec", "--full", "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "airflow-provider-iceberg-exec" in done.stdout
    assert "IcebergExecHook" in done.stdout

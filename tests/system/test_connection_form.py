"""The ``iceberg_exec`` connection form in Airflow's own UI, driven in headless Chromium.

The test starts ``airflow api-server`` (simple auth manager, a fresh SQLite metadata DB), signs in through
the login page, adds a connection through the Add Connection form (the relabelled standard fields, the
catalog type list, the S3 fields), saves it, and checks three things: the form shows the provider's
labels and renders the secrets as password inputs; the connection as Airflow stored it gives, through
``IcebergExecHook``, the expected catalog config; and the row's Test button reports the hook's success
message for a real SQLite catalog the test creates.

``ICEBERG_EXEC_FORM_SCREENSHOT=docs/img/connection-form.png`` also writes the picture in
docs/connections.md (needs Pillow, which the bench extra brings).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.system.browser import ADMIN, ADMIN_PASSWORD, ApiServer, api_server, chromium, require_browser

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement
    from selenium.webdriver.support.wait import WebDriverWait

pytestmark = pytest.mark.system

CONN_ID = "iceberg_ui_form"
SCREENSHOT_ENV = "ICEBERG_EXEC_FORM_SCREENSHOT"

#: standard field name -> the provider's label (ui-field-behaviour relabeling)
RELABELLED = {
    "host": "Catalog URI",
    "login": "Client ID",
    "password": "Client secret or token",
    "schema": "Warehouse",
}
#: extra field name -> (the provider's label, what the test types); conn-fields in get_provider_info
EXTRAS = {
    "catalog_name": ("Catalog name", "demo"),
    "s3_endpoint": ("S3 endpoint", "http://127.0.0.1:9000"),
    "s3_region": ("S3 region", "eu-central-1"),
    "s3_access_key_id": ("S3 access key id", "AKIDFORMTEST"),
    "s3_secret_access_key": ("S3 secret access key", "form-secret-key"),
    "s3_session_token": ("S3 session token", "form-session-token"),
}
SECRET_EXTRAS = {"s3_secret_access_key", "s3_session_token"}


@pytest.fixture
def demo_catalog(tmp_path: Path) -> tuple[str, str]:
    """A real SQLite SQL catalog named ``demo`` with one namespace: its URI and warehouse."""
    from pyiceberg.catalog.sql import SqlCatalog

    uri, warehouse = f"sqlite:///{tmp_path}/catalog.db", f"file://{tmp_path}/warehouse"
    catalog = SqlCatalog("demo", uri=uri, warehouse=warehouse)
    catalog.create_namespace("demo")
    catalog.engine.dispose()
    return uri, warehouse


@pytest.fixture
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    require_browser()  # before the migration: a skip costs nothing
    airflow_db: str = request.getfixturevalue("airflow_db")
    home = tmp_path_factory.mktemp("ui-airflow-home")
    shutil.copy(Path(airflow_db) / "airflow.db", home / "airflow.db")  # migrated once per session
    with api_server(home) as running:
        yield running


@pytest.fixture
def driver(server: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as browser:
        yield browser


def _wait(driver: WebDriver, timeout: float = 60) -> WebDriverWait[WebDriver]:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout)


def _input_labelled(driver: WebDriver, label: str) -> WebElement:
    """The input a visible ``<label>`` names (Chakra links them by ``for``/``id``)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    xpath = f"//div[@role='dialog']//label[normalize-space(.)='{label}']"
    found = _wait(driver).until(ec.visibility_of_element_located((By.XPATH, xpath)))
    return driver.find_element(By.ID, str(found.get_attribute("for")))


def _extra_input(driver: WebDriver, name: str) -> WebElement:
    """The input of extra field ``name`` (the form names it ``element_<name>``)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    return _wait(driver).until(ec.visibility_of_element_located((By.NAME, f"element_{name}")))


def _label_of(field: WebElement) -> str:
    """The text of the label in ``field``'s form row (the extra fields' labels do not name their input)."""
    from selenium.webdriver.common.by import By

    label = field.find_element(By.XPATH, "./ancestor::*[.//label][1]//label")
    return " ".join(str(label.get_attribute("textContent")).split())  # also when its section is closed


def _choose(driver: WebDriver, select_input: WebElement, option: str) -> None:
    """Pick ``option`` in a react-select list: type it, then click the matching entry."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    select_input.send_keys(option)
    xpath = f"//div[contains(@id, '-option-')][normalize-space(.)='{option}']"
    _wait(driver).until(ec.element_to_be_clickable((By.XPATH, xpath))).click()


def _open_section(driver: WebDriver, section: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    xpath = f"//div[@role='dialog']//button[contains(@id, ':trigger:')][normalize-space(.)='{section}']"
    _wait(driver).until(ec.element_to_be_clickable((By.XPATH, xpath))).click()


def _sign_in(driver: WebDriver, url: str) -> None:
    """Sign in through the simple auth manager's login page and land on the connections list."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    driver.get(f"{url}/connections")
    _wait(driver).until(ec.visibility_of_element_located((By.NAME, "username"))).send_keys(ADMIN)
    driver.find_element(By.NAME, "password").send_keys(ADMIN_PASSWORD)
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    _wait(driver).until(ec.url_matches(r"/connections$"))


def _fill_standard_fields(driver: WebDriver, uri: str, warehouse: str) -> dict[str, WebElement]:
    """Open Add Connection, pick the iceberg_exec type, fill the standard fields; the fields by name."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    add = "//button[normalize-space(.)='Add Connection']"
    _wait(driver).until(ec.element_to_be_clickable((By.XPATH, add))).click()
    _wait(driver).until(ec.element_to_be_clickable((By.NAME, "connection_id"))).send_keys(CONN_ID)
    _choose(driver, _input_labelled(driver, "Connection Type *"), "Iceberg catalog (iceberg-exec)")
    fields = {name: _input_labelled(driver, label) for name, label in RELABELLED.items()}
    fields["host"].send_keys(uri)
    fields["schema"].send_keys(warehouse)
    return fields


def _fill_extra_fields(driver: WebDriver) -> dict[str, WebElement]:
    """Open Extra Fields and fill every one: type ``sql``, the S3 settings, path-style access on."""
    from selenium.webdriver.common.by import By

    _open_section(driver, "Extra Fields")
    _choose(driver, _input_labelled(driver, "Catalog type"), "sql")
    fields = {name: _extra_input(driver, name) for name in EXTRAS}
    for name, (_, value) in EXTRAS.items():
        fields[name].send_keys(value)
    _input_labelled(driver, "S3 path-style access")  # waits for it to show
    driver.find_element(By.ID, "switch:element_s3_path_style_access").click()
    return fields


def _save(driver: WebDriver) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    save = "//div[@role='dialog']//button[normalize-space(.)='Save']"
    _wait(driver).until(ec.element_to_be_clickable((By.XPATH, save))).click()
    _wait(driver).until(ec.invisibility_of_element_located((By.CSS_SELECTOR, "[role=dialog]")))


def _test_in_ui(driver: WebDriver) -> tuple[str, str]:
    """Click the connection row's Test button; the title and message of the toast it raises."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    row = f"//tr[td[normalize-space(.)='{CONN_ID}']]"
    button = f"{row}//button[@aria-label='Test Connection']"
    titles = "[id^='toast:'][id$=':title']"
    earlier = {e.get_attribute("id") for e in driver.find_elements(By.CSS_SELECTOR, titles)}  # Save's
    _wait(driver).until(ec.element_to_be_clickable((By.XPATH, button))).click()

    def new_toast(drv: WebDriver) -> WebElement | None:
        found = drv.find_elements(By.CSS_SELECTOR, titles)
        fresh = [e for e in found if e.get_attribute("id") not in earlier]
        return fresh[0] if fresh and fresh[0].is_displayed() else None

    title = _wait(driver).until(new_toast)
    message = driver.find_element(By.ID, str(title.get_attribute("id")).replace(":title", ":description"))
    # the button's icon turns green on success (red on failure)
    green = f"{button}//*[local-name()='svg'][@color='green']"
    _wait(driver).until(ec.presence_of_element_located((By.XPATH, green)))
    return str(title.text), str(message.text)


def _stored_connection(server: ApiServer, tmp_path: Path) -> dict[str, Any]:
    """The connection as Airflow stored it, exported by ``airflow connections export`` (JSON)."""
    out = tmp_path / "connections.json"
    server.cli("connections", "export", str(out), "--file-format", "json")
    stored: dict[str, Any] = json.loads(out.read_text())[CONN_ID]
    return stored


def _save_screenshot(pictures: list[bytes], tmp_path: Path) -> None:
    """Keep the form's pictures; side by side in ``$ICEBERG_EXEC_FORM_SCREENSHOT`` when that is set."""
    for number, picture in enumerate(pictures):
        (tmp_path / f"form-{number}.png").write_bytes(picture)
    target = os.environ.get(SCREENSHOT_ENV)
    if not target:
        return
    import io

    from PIL import Image

    images = [Image.open(io.BytesIO(picture)).convert("RGB") for picture in pictures]
    sheet = Image.new("RGB", (sum(i.width for i in images), max(i.height for i in images)), "white")
    left = 0
    for image in images:
        sheet.paste(image, (left, 0))
        left += image.width
    sheet.quantize(colors=64).save(target, optimize=True)


def test_connection_added_through_the_form_maps_to_the_catalog_and_tests_green(
    server: ApiServer, driver: WebDriver, demo_catalog: tuple[str, str], tmp_path: Path, monkeypatch
) -> None:
    from selenium.webdriver.common.by import By

    from airflow_provider_iceberg_exec.hooks.iceberg_exec import IcebergExecHook

    uri, warehouse = demo_catalog
    _sign_in(driver, server.url)
    standard = _fill_standard_fields(driver, uri, warehouse)
    dialog = driver.find_element(By.CSS_SELECTOR, "[role=dialog]")
    pictures = [dialog.screenshot_as_png]
    extras = _fill_extra_fields(driver)
    pictures.append(dialog.screenshot_as_png)

    # the provider's labels, Port and Extra hidden, secrets as password inputs
    assert {name: _label_of(field) for name, field in standard.items()} == RELABELLED
    assert {name: _label_of(field) for name, field in extras.items()} == {
        name: label for name, (label, _) in EXTRAS.items()
    }
    assert driver.find_elements(By.CSS_SELECTOR, "[role=dialog] input[name=port]") == []
    assert driver.find_elements(By.CSS_SELECTOR, "[role=dialog] input[name=extra]") == []
    types = {name: field.get_attribute("type") for name, field in {**standard, **extras}.items()}
    assert {name for name, kind in types.items() if kind == "password"} == {"password", *SECRET_EXTRAS}
    assert set(types.values()) == {"text", "password"}
    _save_screenshot(pictures, tmp_path)
    _save(driver)

    stored = _stored_connection(server, tmp_path)
    assert stored["conn_type"] == "iceberg_exec"
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(stored))
    config = IcebergExecHook(CONN_ID).catalog_config
    assert config.name == "demo"
    assert dict(config.properties) == {
        "type": "sql",
        "uri": uri,
        "warehouse": warehouse,
        "s3.endpoint": "http://127.0.0.1:9000",
        "s3.region": "eu-central-1",
        "s3.access-key-id": "AKIDFORMTEST",
        "s3.secret-access-key": "form-secret-key",
        "s3.session-token": "form-session-token",
        "s3.path-style-access": "true",
    }

    title, message = _test_in_ui(driver)
    # the hook's own message: the catalog name and its one namespace came through the stored extras
    assert message == "Connected to catalog 'demo' (1 top-level namespaces)", (title, server.log_tail())

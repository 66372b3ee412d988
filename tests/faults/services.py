"""Services the fault tests break on purpose: a SeaweedFS that can be killed and restarted in place.

:func:`tests.integration.services.start_seaweedfs` owns its process and only stops it at the end; a
fault test needs to kill the server in the middle of an operation (``SIGKILL``: connections refused at
once, as after a crash) and bring it back with the same ports, credentials and data directory, so that
the objects written before the crash are there again. The command line is the one of
``start_seaweedfs``; the helpers (free ports, the readiness probe, the process stop) are reused from
there.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.integration.services import (
    SeaweedFS,
    ServiceError,
    _die_with_parent,
    _free_ports,
    _s3_round_trip,
    _stop_process,
    _wait_until,
    _weed_binary,
)

__all__ = ["RestartableSeaweedFS", "ServiceError", "restartable_seaweedfs"]


class RestartableSeaweedFS:
    """``weed server -s3`` on fixed loopback ports and a kept data directory, killable and restartable.

    :attr:`server` describes the endpoint and credentials; they stay the same across restarts.
    """

    def __init__(self, base_dir: Path, *, bucket: str = "iceberg") -> None:
        self._weed = _weed_binary()
        self.root = Path(tempfile.mkdtemp(prefix="seaweedfs-faults-", dir=base_dir))
        data_dir, log_path = self.root / "data", self.root / "weed.log"
        data_dir.mkdir()
        access_key = "AK" + secrets.token_hex(8).upper()
        secret_key = "sk-" + secrets.token_urlsafe(24)
        config = self.root / "s3.json"
        identity = {
            "name": "iceberg-exec-fault-tests",
            "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }
        config.write_text(json.dumps({"identities": [identity]}))
        config.chmod(0o600)
        self._ports = _free_ports(8)
        master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = self._ports
        self._command = [
            self._weed,
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={data_dir}",
            f"-master.port={master}",
            f"-master.port.grpc={master_grpc}",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=256",
            # A restarted single master waits out the election timeout (10 s) before it leads again.
            "-master.electionTimeout=1s",
            f"-volume.port={volume}",
            f"-volume.port.grpc={volume_grpc}",
            "-volume.max=32",
            "-volume.preStopSeconds=0",
            "-filer",
            f"-filer.port={filer}",
            f"-filer.port.grpc={filer_grpc}",
            f"-filer.localSocket={self.root}/filer.sock",
            "-s3",
            f"-s3.port={s3}",
            f"-s3.port.grpc={s3_grpc}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.localSocket={self.root}/s3.sock",
            f"-s3.config={config}",
            "-s3.autoCreateBucket=false",
        ]
        self.server = SeaweedFS(
            endpoint=f"http://127.0.0.1:{s3}",
            region="us-east-1",
            access_key=access_key,
            secret_key=secret_key,
            bucket=bucket,
            filer_url=f"http://127.0.0.1:{filer}",
            data_dir=data_dir,
            log_path=log_path,
        )
        self._process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the server (again) and wait until a signed put/get/delete round trip works."""
        if self.running:
            return
        # The unix sockets of a killed server are left behind; the new one cannot bind over them.
        self._remove_sockets()
        with open(self.server.log_path, "ab") as log:
            log.write(f"\n===== start {self.starts + 1} =====\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                self._command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.root,
                preexec_fn=_die_with_parent,
            )
        self.starts += 1
        _wait_until(
            lambda: _s3_round_trip(self.server),
            what="SeaweedFS S3 gateway",
            log_path=self.server.log_path,
            process=self._process,
        )

    def kill(self) -> None:
        """``SIGKILL`` the server (a crash): every request is refused from now on, until :meth:`start`."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    def close(self) -> None:
        """Stop the server and remove its data."""
        try:
            if self._process is not None:
                _stop_process(self._process, grace_seconds=3.0)
        finally:
            self._remove_sockets()
            shutil.rmtree(self.root, ignore_errors=True)

    def _remove_sockets(self) -> None:
        for name in ("filer.sock", "s3.sock"):
            with contextlib.suppress(OSError):
                os.remove(self.root / name)
        _master, master_grpc, _volume, volume_grpc, _filer, filer_grpc, _s3, s3_grpc = self._ports
        for port in (master_grpc, volume_grpc, filer_grpc, s3_grpc):
            for path in glob.glob(f"/tmp/seaweedfs-*-grpc-{port}.sock"):
                with contextlib.suppress(OSError):
                    os.remove(path)


@contextlib.contextmanager
def restartable_seaweedfs(base_dir: Path) -> Iterator[RestartableSeaweedFS]:
    """A started :class:`RestartableSeaweedFS`, stopped and removed at the end.

    :raises ServiceError: when the binary is missing or the S3 gateway does not answer in time.
    """
    service = RestartableSeaweedFS(base_dir)
    try:
        service.start()
        yield service
    finally:
        service.close()

"""A TCP proxy in front of PostgreSQL that loses the server's reply to the catalog's COMMIT.

The failure it injects is the one that makes a commit's outcome unknown: the catalog's transaction
(``UPDATE iceberg_tables ... ; COMMIT``) reaches the server and commits there, and the connection dies
before the client reads the reply. The proxy forwards every byte in both directions and reads the
client's messages (PostgreSQL's frontend protocol: an untyped startup packet, possibly after an
SSL/GSS request, then ``type byte + int32 length + body``). Once armed, on the first connection that sent
``UPDATE iceberg_tables`` and then ``COMMIT``, it forwards the COMMIT, waits for the server's answer, and
closes both sides without passing that answer on. Nothing of PostgreSQL is faked: the server commits.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator

__all__ = ["CommitReplyDropper", "commit_reply_dropper"]

_SSL_REQUEST = 80877103
_GSS_REQUEST = 80877104
_CANCEL_REQUEST = 80877102


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("peer closed")
        data += chunk
    return bytes(data)


class CommitReplyDropper:
    """The proxy; connect to ``127.0.0.1:port`` instead of the server."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._listener.settimeout(0.2)  # accept() wakes up to notice close()
        self._lock = threading.Lock()
        self._armed = False
        self.fired = threading.Event()
        self.reply_swallowed = threading.Event()
        #: ``UPDATE iceberg_tables`` statements seen on any connection (the catalog's pointer swaps)
        self.pointer_swaps = 0
        self._closing = False
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="pg-proxy", daemon=True)
        self._thread.start()

    def arm(self) -> None:
        """Drop the reply to the next COMMIT that follows a catalog pointer swap."""
        with self._lock:
            self._armed = True

    def close(self) -> None:
        self._closing = True
        self._listener.close()
        for sock in list(self._sockets):
            with contextlib.suppress(OSError):
                sock.close()
        self._thread.join(timeout=10)

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            try:
                server = socket.create_connection(self._upstream, timeout=10)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            self._sockets += [client, server]
            link = _Link(self, client, server)
            threading.Thread(target=link.client_to_server, daemon=True).start()
            threading.Thread(target=link.server_to_client, daemon=True).start()

    def _take_shot(self) -> bool:
        with self._lock:
            if not self._armed:
                return False
            self._armed = False
            return True


class _Link:
    """One proxied connection: two pumps; the client side parses messages."""

    def __init__(self, proxy: CommitReplyDropper, client: socket.socket, server: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server = server
        self.swapped = False  # this connection's transaction sent the catalog's UPDATE
        self.drop_reply = threading.Event()

    def _close(self) -> None:
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def client_to_server(self) -> None:
        try:
            while True:  # untyped packets until the startup message itself
                head = _read_exactly(self.client, 8)
                length, code = struct.unpack("!ii", head)
                body = _read_exactly(self.client, length - 8)
                self.server.sendall(head + body)
                if code not in (_SSL_REQUEST, _GSS_REQUEST, _CANCEL_REQUEST):
                    break
            while True:
                head = _read_exactly(self.client, 5)
                kind, length = head[:1], struct.unpack("!i", head[1:])[0]
                body = _read_exactly(self.client, length - 4)
                if kind == b"Q":
                    sql = body.rstrip(b"\0").decode(errors="replace").strip()
                    if sql.upper().startswith("UPDATE ICEBERG_TABLES"):
                        self.swapped = True
                        with self.proxy._lock:
                            self.proxy.pointer_swaps += 1
                    elif sql.upper() == "COMMIT" and self.swapped and self.proxy._take_shot():
                        self.drop_reply.set()  # before forwarding: every later server byte answers it
                        self.proxy.fired.set()
                    elif sql.upper() in ("COMMIT", "ROLLBACK"):
                        self.swapped = False
                self.server.sendall(head + body)
        except (ConnectionError, OSError):
            pass
        finally:
            if not self.drop_reply.is_set():
                self._close()

    def server_to_client(self) -> None:
        try:
            while True:
                data = self.server.recv(65536)
                if not data:
                    break
                if self.drop_reply.is_set():
                    # The server answered the COMMIT: it has committed. The client never learns it.
                    self.proxy.reply_swallowed.set()
                    break
                self.client.sendall(data)
        except OSError:
            pass
        finally:
            self._close()


@contextlib.contextmanager
def commit_reply_dropper(host: str, port: int) -> Iterator[CommitReplyDropper]:
    proxy = CommitReplyDropper(host, port)
    try:
        yield proxy
    finally:
        proxy.close()

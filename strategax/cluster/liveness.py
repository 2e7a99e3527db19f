"""The workers' own small protocol on their TF_CONFIG addresses: liveness pings, the start-up
handshake and start-up failure notices. One line each way, `strategax/1 WORD ...`.

The server serves every connection at once (a selector loop in one daemon thread) and drops,
without answering, any connection that does not send one protocol line within IDLE_S: idle or
foreign connections (a port scanner, a stray gRPC client) cannot make a live worker look
unresponsive.
"""
from __future__ import annotations

import selectors
import socket
import threading
import time
from typing import Callable, cast

from .address import split_address

MAGIC = "strategax/1"
MAX_LINE = 1024
IDLE_S = 2.0
MAX_CONNECTIONS = 256


def _sockaddr(address: str) -> tuple[int, tuple]:
    host, port = split_address(address)
    family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    return family, sockaddr


class Server:
    """Answers protocol lines on `address` (that host only, never all interfaces):
    `handler(words) -> reply words or None`. Raises OSError when the port cannot be bound."""

    def __init__(self, address: str, handler: Callable[[list[str]], str | None]):
        family, sockaddr = _sockaddr(address)
        self._handler = handler
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT, not a listener
            self._sock.bind(sockaddr)
            self._sock.listen(64)
        except OSError:
            self._sock.close()
            raise
        self._sock.setblocking(False)
        self.bound = self._sock.getsockname()
        self._closed = threading.Event()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._sock, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._serve, name="strategax-liveness", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop listening (the port is free when this returns)."""
        self._closed.set()
        self._thread.join(timeout=2.0)

    def _serve(self) -> None:
        pending: dict[socket.socket, tuple[bytearray, float]] = {}
        try:
            while not self._closed.is_set():
                for key, _ in self._selector.select(timeout=0.1):
                    if key.fileobj is self._sock:
                        self._accept(pending)
                    else:
                        self._read(cast(socket.socket, key.fileobj), pending)  # a connection registered above
                now = time.monotonic()
                for conn in [c for c, (_, deadline) in pending.items() if deadline < now]:
                    self._drop(conn, pending)
        finally:
            for conn in list(pending):
                self._drop(conn, pending)
            self._selector.close()
            self._sock.close()

    def _accept(self, pending: dict) -> None:
        for _ in range(64):  # bounded: the rest wait for the next round
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if len(pending) >= MAX_CONNECTIONS:
                conn.close()
                continue
            conn.setblocking(False)
            pending[conn] = (bytearray(), time.monotonic() + IDLE_S)
            self._selector.register(conn, selectors.EVENT_READ)

    def _read(self, conn: socket.socket, pending: dict) -> None:
        buffer, _ = pending[conn]
        try:
            data = conn.recv(MAX_LINE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        buffer += data
        if not data or len(buffer) > MAX_LINE:
            self._drop(conn, pending)
            return
        if b"\n" not in buffer:
            return
        reply = self._answer(bytes(buffer.split(b"\n", 1)[0]))
        if reply is not None:
            try:
                conn.send(f"{MAGIC} {reply}\n".encode("ascii", "replace"))  # a short line: fits the buffer
            except OSError:
                pass
        self._drop(conn, pending)

    def _answer(self, line: bytes) -> str | None:
        words = line.decode("ascii", "replace").split(" ")
        if len(words) < 2 or words[0] != MAGIC:
            return None
        try:
            return self._handler(words[1:])
        except Exception:  # noqa: BLE001 - a malformed line gets no answer
            return None

    def _drop(self, conn: socket.socket, pending: dict) -> None:
        pending.pop(conn, None)
        try:
            self._selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()


def request(address: str, message: str, timeout: float = 2.0) -> str | None:
    """Send one protocol line to `address`; its answer (without the prefix), or None when the
    peer closed without one. Raises OSError when nothing listens there, socket.timeout when
    nothing answers in time."""
    with socket.create_connection(split_address(address), timeout=timeout) as s:
        s.sendall(f"{MAGIC} {message}\n".encode("ascii", "replace"))
        data = b""
        while b"\n" not in data and len(data) <= MAX_LINE:
            chunk = s.recv(MAX_LINE)
            if not chunk:
                break
            data += chunk
    words = data.split(b"\n", 1)[0].decode("ascii", "replace").split(" ", 1)
    return words[1] if len(words) == 2 and words[0] == MAGIC else None


# An HTTP/2 client's connection preface and an empty SETTINGS frame: a live gRPC server (JAX's
# coordination service) answers with its own SETTINGS frame; a stopped one accepts the connection
# (the kernel does) but sends nothing.
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
H2_SETTINGS = 4


def _grpc_answers(address: str, timeout: float) -> bool:
    """Whether the gRPC server at `address` answers an HTTP/2 preface (its SETTINGS frame)."""
    with socket.create_connection(split_address(address), timeout=timeout) as s:
        s.sendall(H2_PREFACE)
        data = b""
        while len(data) < 9:
            chunk = s.recv(64)
            if not chunk:
                break
            data += chunk
    return len(data) >= 9 and data[3] == H2_SETTINGS


def probe(address: str, ping: bool, timeout: float = 2.0) -> str:
    """"alive", "dead" (nothing listens: the process is gone) or "unresponsive" (hung or
    stopped). Without `ping` (the coordinator, whose port is JAX's gRPC coordination service)
    the service must answer an HTTP/2 preface."""
    try:
        if not ping:
            return "alive" if _grpc_answers(address, timeout) else "unresponsive"
        answer = request(address, "ping", timeout)
    except socket.timeout:
        return "unresponsive"
    except OSError:
        return "dead"
    return "alive" if answer is not None and answer.startswith("alive") else "unresponsive"


def one_line(text: str) -> str:
    """`text` as one protocol-safe line."""
    return " ".join(text.split())[:MAX_LINE - 64]

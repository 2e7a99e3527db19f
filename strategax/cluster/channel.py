"""The direct channels of a parameter-server job: a TCP connection (the standard library's
`multiprocessing.connection`, authenticated with the job's random key) from the coordinator to
each worker, carrying the scheduled functions and their outcomes, and from each worker to each
parameter server, carrying a step's reads and updates. Ray starts the processes and places them;
the per-step traffic bypasses its task machinery, which cost about 0.3-0.5 ms of CPU per call on
each side (three calls a step).

A message is one pickled object (each side picks the pickler: the servers import only NumPy and
the standard library). A peer that dies closes its socket, so a blocked read ends at once with
`EOFError`/`OSError` (TCP keep-alive covers a host that vanishes without closing it).

The functions are defined inside `channel_functions()` so that the parameter-server actor, which
Ray ships by value and which must not import strategax (hence JAX), carries them by value too."""
from __future__ import annotations

from types import SimpleNamespace


def channel_functions() -> SimpleNamespace:
    """listen, serve, connect, request, close (defined here so that they pickle by value)."""
    import socket
    import threading
    from multiprocessing.connection import Client, Listener

    def tune(conn) -> None:
        """No Nagle delay (a header and a large payload go in two writes); keep-alive probes
        after 10 s idle, so that a peer whose host vanished is noticed within about 25 s."""
        sock = socket.socket(fileno=socket.dup(conn.fileno()))
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
                if hasattr(socket, name):
                    sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
        finally:
            sock.close()

    def listen(authkey: bytes):
        """A listener on this node's address (the one Ray knows it by), on a free port."""
        try:
            import ray.util

            host = ray.util.get_node_ip_address()
        except Exception:  # noqa: BLE001 - outside a Ray process: this machine only
            host = "127.0.0.1"
        return Listener((host, 0), family="AF_INET", backlog=64, authkey=authkey)

    def serve(listener, handle, name: str) -> None:
        """Answer every connection to `listener` in a thread of its own: each message's bytes
        go to `handle`, whose bytes go back, in order, until the peer closes."""
        def answer(conn) -> None:
            try:
                while True:
                    conn.send_bytes(handle(conn.recv_bytes()))
            except (EOFError, OSError):
                pass
            finally:
                conn.close()

        def accept() -> None:
            while True:
                try:
                    conn = listener.accept()
                except OSError:  # the listener was closed
                    return
                except Exception:  # noqa: BLE001 - a peer without the key: refused, keep serving
                    continue
                tune(conn)
                threading.Thread(target=answer, args=(conn,), name=f"{name}-conn", daemon=True).start()

        threading.Thread(target=accept, name=f"{name}-accept", daemon=True).start()

    def connect(address, authkey: bytes):
        conn = Client(tuple(address), family="AF_INET", authkey=authkey)
        tune(conn)
        return conn

    def request(conn, payload: bytes, timeout: float | None = None) -> bytes:
        """Send `payload` and wait for the answer (TimeoutError after `timeout` seconds)."""
        conn.send_bytes(payload)
        if timeout is not None and not conn.poll(timeout):
            raise TimeoutError(f"no answer within {timeout:g} s")
        return conn.recv_bytes()

    def close(conn) -> None:
        """Close `conn`, waking a thread blocked reading it (a plain close would not)."""
        try:
            sock = socket.socket(fileno=socket.dup(conn.fileno()))
            try:
                sock.shutdown(socket.SHUT_RDWR)
            finally:
                sock.close()
        except OSError:
            pass
        conn.close()

    return SimpleNamespace(tune=tune, listen=listen, serve=serve, connect=connect, request=request, close=close)


_FUNCTIONS = channel_functions()
listen, serve, connect, request, close = (_FUNCTIONS.listen, _FUNCTIONS.serve, _FUNCTIONS.connect,
                                          _FUNCTIONS.request, _FUNCTIONS.close)

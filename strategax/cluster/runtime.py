"""Faults of a multi-worker job: bound every step by `CommunicationOptions.timeout_seconds`
and turn a lost worker into a clear error (and a non-zero exit) instead of a hang.

Each worker but the coordinator (worker 0, whose address is JAX's coordination service)
answers liveness pings on its own TF_CONFIG port. When a collective fails or a step
outlives its bound, the survivor pings its peers to name the lost ones.
"""
from __future__ import annotations

import atexit
import os
import socket
import sys
import threading
import time
from typing import Callable, Sequence

import jax

STARTUP_SLACK_S = 60.0  # a program's first step also compiles and lets the workers rendezvous
_PING, _PONG = b"?", b"!"


class WorkerLostError(RuntimeError):
    """A worker of a multi-worker job died or stopped answering during a step."""

    def __init__(self, message: str, lost: Sequence[int] = ()):
        super().__init__(message)
        self.lost = tuple(lost)


def _split(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host.strip("[]"), int(port)


class LivenessListener:
    """Answers pings on this worker's own address from a daemon thread."""

    def __init__(self, address: str):
        host, port = _split(address)
        self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self._sock.listen(16)
        threading.Thread(target=self._serve, name="strategax-liveness", daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.settimeout(1.0)
                    if conn.recv(1) == _PING:
                        conn.sendall(_PONG)
                except OSError:
                    pass


def probe(address: str, ping: bool, timeout: float = 2.0) -> str:
    """"alive", "dead" (nothing listens: the process is gone) or "unresponsive"."""
    try:
        with socket.create_connection(_split(address), timeout=timeout) as s:
            if not ping:
                return "alive"
            s.sendall(_PING)
            return "alive" if s.recv(1) == _PONG else "dead"
    except socket.timeout:
        return "unresponsive"
    except OSError:
        return "dead"


# Run in a small child process of every non-coordinator worker: when the worker dies without
# saying goodbye on the pipe (JAX aborts it the moment the coordinator is gone, and that abort
# cannot be intercepted from Python), name the coordinator if it is the one that is gone.
_WATCH = r"""
import socket, sys
me, total, host, port, address = sys.argv[1:]
if sys.stdin.buffer.read() == b"bye":
    raise SystemExit
try:
    socket.create_connection((host, int(port)), timeout=2).close()
except OSError:
    sys.stderr.write(f"strategax: worker {me} of {total}: the job's coordination service failed: "
                     f"worker 0 (chief/coordinator, task index 0, {address}) was lost (its process "
                     "is gone). The job cannot continue: restart it (from the last checkpoint).\n")
"""


def watch_coordinator(addresses: Sequence[str], index: int) -> None:
    """Start the child that names a lost coordinator after JAX aborts this worker."""
    import subprocess

    host, port = _split(addresses[0])
    child = subprocess.Popen([sys.executable, "-c", _WATCH, str(index), str(len(addresses)), host, str(port),
                              addresses[0]], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)

    def goodbye() -> None:
        try:
            child.stdin.write(b"bye")
            child.stdin.close()
        except OSError:
            pass

    atexit.register(goodbye)


class WorkerRuntime:
    """This process's view of the job: who the workers are, and the bound on each step."""

    def __init__(self, addresses: Sequence[str], index: int, timeout_seconds: float | None):
        self.addresses, self.index, self.timeout = list(addresses), index, timeout_seconds
        self._failed = False
        self._started: set[int] = set()
        self._deadline: float | None = None
        self._cond = threading.Condition()
        self._listener = None
        if index > 0:
            try:
                self._listener = LivenessListener(addresses[index])
            except OSError:  # the port is taken: peers will report this worker as unreachable
                self._listener = None
        if index > 0:
            watch_coordinator(addresses, index)
        atexit.register(self._exit_if_failed)  # runs before jax.distributed's shutdown barrier
        if timeout_seconds is not None:
            threading.Thread(target=self._watch, name="strategax-watchdog", daemon=True).start()

    def describe(self, i: int) -> str:
        role = "chief/coordinator" if i == 0 else "worker"
        return f"worker {i} ({role}, task index {i}, {self.addresses[i]})"

    def find_lost(self, attempts: int = 8) -> tuple[list[int], list[int]]:
        """(dead, unresponsive) peers; retried briefly while a dying peer's sockets close."""
        dead, slow = [], []
        for _ in range(attempts):
            states = {i: probe(a, ping=i > 0) for i, a in enumerate(self.addresses) if i != self.index}
            dead = [i for i, s in states.items() if s == "dead"]
            slow = [i for i, s in states.items() if s == "unresponsive"]
            if dead or slow:
                break
            time.sleep(0.25)
        return dead, slow

    def _lost_message(self, what: str) -> tuple[str, list[int]]:
        dead, slow = self.find_lost()
        parts = [f"{self.describe(i)} was lost (its process is gone)" for i in dead]
        parts += [f"{self.describe(i)} does not answer" for i in slow]
        who = "; ".join(parts) or "no peer was found dead; a peer may be hanging"
        return (f"strategax: worker {self.index} of {len(self.addresses)}: {what}: {who}. "
                "The job cannot continue: restart it (from the last checkpoint)."), dead + slow

    def lost_worker_error(self, what: str) -> WorkerLostError | None:
        """After `what` failed: a WorkerLostError naming the lost peers (also printed, and this
        process will exit non-zero), or None when every peer answers."""
        message, lost = self._lost_message(what)
        if not lost:
            return None
        self._failed = True
        print(message, file=sys.stderr, flush=True)
        return WorkerLostError(message, lost)

    # --- bounding a step ------------------------------------------------------------------
    def call(self, fn: Callable, key: int):
        """Run one step and wait for it; a failed collective raises WorkerLostError."""
        bound = None
        if self.timeout is not None:
            bound = self.timeout + (STARTUP_SLACK_S if key not in self._started else 0.0)
        with self._cond:
            self._deadline = None if bound is None else time.monotonic() + bound
            self._cond.notify()
        try:
            return jax.block_until_ready(fn())
        except jax.errors.JaxRuntimeError as e:
            lost = self.lost_worker_error(f"a collective failed ({str(e).splitlines()[0][:200]})")
            if lost is None:
                raise
            raise lost from e
        finally:
            with self._cond:
                self._deadline = None
            self._started.add(key)

    def _watch(self) -> None:
        while True:
            with self._cond:
                while self._deadline is None or time.monotonic() < self._deadline:
                    wait = None if self._deadline is None else self._deadline - time.monotonic()
                    self._cond.wait(wait)
            message, _ = self._lost_message(
                f"a step did not finish within timeout_seconds={self.timeout:g} (CommunicationOptions)")
            print(message, file=sys.stderr, flush=True)
            os._exit(1)  # the step is stuck inside XLA: nothing in this process can unblock it

    def _exit_if_failed(self) -> None:
        if self._failed:  # skip jax.distributed's shutdown barrier: a peer can never reach it
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)

"""Joining a multi-worker job: every worker listens only on its own TF_CONFIG address, and a
worker that cannot start is named on every worker within seconds.

Before JAX's distributed runtime starts, the workers shake hands over their own protocol
(`liveness`): worker 0 listens on the coordinator's address, each other worker on its own and
says hello to worker 0 until told "go". A worker whose port is taken, or that cannot join,
sends an abort notice naming itself and the cause to the others, which raise (or, when they
are already blocked inside JAX's initialisation, print it and exit 1). Then
`jax.distributed.initialize` runs with the coordination service bound to worker 0's TF_CONFIG
address (JAX's default is all interfaces) and gloo's transport bound to this worker's host.
"""
from __future__ import annotations

import contextlib
import errno
import math
import os
import sys
import threading
import time

import jax

from .address import split_address
from .errors import ClusterStartError
from .liveness import Server, one_line, request
from .peers import Peers

JOIN_TIMEOUT_S = 120.0  # how long a worker waits for the others to start (join_timeout_seconds=)
NOTIFY_S = 10.0  # how long a failing worker keeps trying to tell the others
POLL_S = 0.1


def _fix(what: str) -> str:
    return {"port": "free the port (another program, or a previous run of this job, holds it) or give "
                    "the task another address in TF_CONFIG, then restart every worker",
            "peer": "see that worker's own error; fix it and restart every worker"}[what]


def notify(peers: Peers, targets, text: str, window: float = NOTIFY_S) -> None:
    """Best effort, bounded: tell `targets` that this worker cannot start, and why."""
    pending, deadline = set(targets), time.monotonic() + window
    message = f"abort {peers.index} {one_line(text)}"
    while pending and time.monotonic() < deadline:
        for i in sorted(pending):
            try:
                if request(peers.addresses[i], message, timeout=1.0) is not None:
                    pending.discard(i)
            except OSError:
                pass
        if pending:
            time.sleep(0.2)


def _abort_text(peers: Peers, who: int, reason: str) -> str:
    return f"{peers.me()}: the job cannot start: {peers.describe(who)} failed: {reason}"


class _Handler:
    """Protocol lines during start-up (and pings for the worker's life)."""

    def __init__(self, peers: Peers):
        self.peers = peers
        self.phase = "handshake"  # then "joining" (blocked inside JAX), then "running"
        self.aborts: list[tuple[int, str]] = []
        self.ready: set[int] = set()
        self.told: set[int] = set()
        self._lock = threading.Lock()

    def __call__(self, words: list[str]) -> str | None:
        kind = words[0]
        if kind == "ping":
            return f"alive {self.peers.index}"
        if kind == "hello" and self.peers.index == 0 and len(words) == 2:
            k = int(words[1])
            if k not in self.peers.others:
                return None
            with self._lock:
                self.ready.add(k)
                if len(self.ready) < len(self.peers.others):
                    return "wait"
                self.told.add(k)
            return "go"
        if kind == "abort" and len(words) >= 3:
            k = int(words[1])
            if k not in self.peers.others or self.phase == "running":
                return None
            reason = " ".join(words[2:])
            with self._lock:
                self.aborts.append((k, reason))
            if self.phase == "joining":  # the main thread is inside JAX: nothing else can stop it
                print(_abort_text(self.peers, k, reason), file=sys.stderr, flush=True)
                os._exit(1)
            return "ok"
        return None

    def raise_if_aborted(self) -> None:
        if self.aborts:
            k, reason = self.aborts[0]
            raise ClusterStartError(_abort_text(self.peers, k, reason), _fix("peer"))


def _listen(peers: Peers, handler: _Handler, targets) -> Server:
    address = peers.addresses[peers.index]
    try:
        return Server(address, handler)
    except OSError as e:
        cause = "taken" if e.errno == errno.EADDRINUSE else "unusable"
        reason = f"cannot listen on {address} (port {split_address(address)[1]} is {cause}: {e.strerror})"
        notify(peers, targets, reason)
        raise ClusterStartError(f"strategax: {peers.describe(peers.index)} {reason}", _fix("port")) from None


def _handshake(peers: Peers, timeout: float) -> tuple[Server | None, _Handler]:
    """Worker 0: listen, wait for every hello, answer go. Others: listen, say hello until go."""
    handler = _Handler(peers)
    deadline = time.monotonic() + timeout
    if peers.index == 0:
        server = _listen(peers, handler, peers.others)
        try:
            while handler.told != set(peers.others):
                if handler.aborts:
                    k, reason = handler.aborts[0]
                    notify(peers, [i for i in peers.others if i != k], f"{peers.describe(k)} failed: {reason}")
                    handler.raise_if_aborted()
                if time.monotonic() > deadline:
                    missing = [i for i in peers.others if i not in handler.ready]
                    reason = "gave up waiting for " + ", ".join(peers.describe(i) for i in missing)
                    notify(peers, [i for i in peers.others if i in handler.ready], reason, window=2.0)
                    raise ClusterStartError(
                        f"{peers.me()}: {', '.join(peers.describe(i) for i in missing)} did not start "
                        f"within {timeout:g} s", "start every worker of the cluster, or give them longer: "
                        "MultiWorkerMirroredStrategy(join_timeout_seconds=...)")
                time.sleep(POLL_S)
        finally:
            server.close()  # the coordination service takes the port next
        return None, handler
    server = _listen(peers, handler, [0, *peers.others])
    while True:
        handler.raise_if_aborted()
        try:
            if request(peers.addresses[0], f"hello {peers.index}", timeout=1.0) == "go":
                handler.phase = "joining"  # from now on a notice ends the process at once
                handler.raise_if_aborted()  # one that came just before
                return server, handler
        except OSError:
            pass  # worker 0 is not listening yet
        if time.monotonic() > deadline:
            server.close()
            raise ClusterStartError(
                f"{peers.me()}: {peers.describe(0)} did not answer the start-up handshake within {timeout:g} s "
                "(it has not started, or another program holds its port)",
                "start worker 0, or give it a free port in TF_CONFIG (or longer to start: "
                "MultiWorkerMirroredStrategy(join_timeout_seconds=...))")
        time.sleep(POLL_S)


@contextlib.contextmanager
def _gloo_bound_to(host: str):
    """JAX creates gloo's TCP transport with no host, so it listens on the address the machine's
    hostname resolves to; give it this worker's TF_CONFIG host instead (jaxlib 0.10.2 reads
    `make_gloo_tcp_collectives` when the CPU backend starts)."""
    from jax._src.lib import _jax  # pyright: ignore[reportPrivateImportUsage]  the hook has no public name

    original = _jax.make_gloo_tcp_collectives

    def bound(distributed_client, hostname=None, interface=None):
        return original(distributed_client=distributed_client, hostname=hostname or host, interface=interface)

    _jax.make_gloo_tcp_collectives = bound
    try:
        yield
    finally:
        _jax.make_gloo_tcp_collectives = original


def join(peers: Peers, heartbeat_s: int, timeout: float = JOIN_TIMEOUT_S) -> Server | None:
    """Hand-shake, start JAX's distributed runtime and the CPU backend; this worker's liveness
    server (None on worker 0, whose port the coordination service holds)."""
    server, handler = _handshake(peers, timeout)
    host = split_address(peers.addresses[peers.index])[0]
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(
            coordinator_address=peers.addresses[0], num_processes=len(peers.addresses),
            process_id=peers.index, coordinator_bind_address=peers.addresses[0],
            initialization_timeout=max(1, math.ceil(timeout)), heartbeat_timeout_seconds=heartbeat_s,
            shutdown_timeout_seconds=heartbeat_s)
        with _gloo_bound_to(host):
            jax.devices()  # the CPU backend and its gloo transport start here
    except jax.errors.JaxRuntimeError as e:
        reason = f"could not join the coordination service at {peers.addresses[0]} ({str(e).splitlines()[0][:200]})"
        notify(peers, [i for i in peers.others if i > 0], reason, window=2.0)
        raise ClusterStartError(f"strategax: {peers.describe(peers.index)} {reason}",
                                "check that every worker runs and that worker 0's port is free; "
                                "restart the job") from None
    handler.phase = "running"
    return server

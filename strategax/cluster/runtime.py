"""Faults of a running multi-worker job: bound every step by `CommunicationOptions.timeout_seconds`
and turn a lost worker into a clear error (and a non-zero exit) instead of a hang.

Each worker but the coordinator (worker 0, whose address is JAX's coordination service)
answers liveness pings on its own TF_CONFIG address (`liveness`). While a step runs longer than
CHECK_S the watchdog pings the peers every CHECK_S, so a worker lost while a program compiles or
waits in a collective is named within seconds; a failed collective or a step that outlives its
bound makes the worker ping its peers to name the lost ones.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from typing import Callable

import jax

from .peers import Peers
from .watcher import stand_down, start_watcher

STARTUP_SLACK_S = 60.0  # a program's first step also compiles
CHECK_S = 1.0  # how often the peers are pinged while a step is in flight


class WorkerLostError(RuntimeError):
    """A worker of a multi-worker job died or stopped answering during a step."""

    def __init__(self, message: str, lost=()):
        super().__init__(message)
        self.lost = tuple(lost)


class WorkerRuntime:
    """This process's view of the job: who the workers are, and the bound on each step."""

    def __init__(self, peers: Peers, timeout_seconds: float | None, server=None):
        self.peers, self.timeout = peers, timeout_seconds
        self._server = server  # answers pings (kept alive with the runtime)
        self._failed = False
        self._started: set = set()
        self._inflight = False  # a step is running
        self._next_check = 0.0  # when the watchdog pings the peers next
        self._deadline: float | None = None  # when the step in flight outlives its bound
        self._cond = threading.Condition()
        start_watcher(peers)
        atexit.register(self._exit_if_failed)  # runs before jax.distributed's shutdown barrier
        threading.Thread(target=self._watch, name="strategax-watchdog", daemon=True).start()

    def lost_worker_error(self, what: str) -> WorkerLostError | None:
        """After `what` failed: a WorkerLostError naming the lost peers (also printed, and this
        process will exit non-zero), or None when every peer answers."""
        dead, slow = self.peers.find_lost()
        if not dead and not slow:
            return None
        message, lost = self.peers.lost_message(what, dead, slow), dead + slow
        self._failed = True
        print(message, file=sys.stderr, flush=True)
        return WorkerLostError(message, lost)

    # --- bounding a step ------------------------------------------------------------------
    def call(self, fn: Callable, key):
        """Run one step (or any program every worker runs) and wait for it; a failed collective
        raises WorkerLostError."""
        bound = None
        if self.timeout is not None:
            bound = self.timeout + (STARTUP_SLACK_S if key not in self._started else 0.0)
        with self._cond:
            now = time.monotonic()
            self._inflight, self._next_check = True, now + CHECK_S
            self._deadline = None if bound is None else now + bound
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
                self._inflight, self._deadline = False, None
            self._started.add(key)

    def _watch(self) -> None:
        """While a step runs: past CHECK_S, ping the peers every CHECK_S (a dead one ends this
        worker, named); past the step's bound, end it naming who does not answer."""
        while True:
            with self._cond:
                while not self._inflight:
                    self._cond.wait()
                now = time.monotonic()
                wake = self._next_check if self._deadline is None else min(self._next_check, self._deadline)
                if now < wake:
                    self._cond.wait(wake - now)
                    continue
                deadline, self._next_check = self._deadline, now + CHECK_S
            if deadline is not None and now >= deadline:
                self._die(f"a step did not finish within timeout_seconds={self.timeout:g} (CommunicationOptions)")
            dead = [i for i, s in self.peers.probe_all().items() if s == "dead"]
            with self._cond:
                running = self._inflight
            if dead and running:
                self._die("a step could not finish", dead)

    def _die(self, what: str, dead=None) -> None:
        """Name the lost peers and exit: the step is stuck inside XLA, nothing here can unblock it."""
        if dead is None:
            dead, slow = self.peers.find_lost()
        else:
            slow = []
        print(self.peers.lost_message(what, dead, slow), file=sys.stderr, flush=True)
        stand_down()
        os._exit(1)

    def _exit_if_failed(self) -> None:
        if self._failed:  # skip jax.distributed's shutdown barrier: a peer can never reach it
            sys.stdout.flush()
            sys.stderr.flush()
            stand_down()
            os._exit(1)

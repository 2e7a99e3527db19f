"""Faults of a running multi-worker job: bound every step by `CommunicationOptions.timeout_seconds`
and turn a lost worker into a clear error (and a non-zero exit) instead of a hang.

Each worker but the coordinator (worker 0, whose address is JAX's coordination service)
answers liveness pings on its own TF_CONFIG address (`liveness`). The watchdog pings the peers
every CHECK_S for the worker's whole life: a peer that has not answered for the heartbeat timeout
(hung, or stopped with SIGSTOP) ends this worker, named, with exit status 1, before JAX's own
heartbeat check would abort it; while a step runs, a dead peer ends it at once; a failed
collective or a step that outlives its bound makes the worker ping its peers to name the lost ones.
"""
from __future__ import annotations

import atexit
import os
import re
import sys
import threading
import time
from typing import Callable

import jax

from .liveness import probe
from .peers import RESTART, Peers
from .watcher import stand_down, start_watcher

STARTUP_SLACK_S = 60.0  # a program's first step also compiles
CHECK_S = 1.0  # how often the peers are pinged
SURVIVORS_EXIT_S = 10.0  # how long a coordinator that found a hung peer waits for the other survivors to exit
HEARTBEAT_TIMEOUT_S = 10.0  # a peer silent this long is hung (MultiWorkerMirroredStrategy(heartbeat_timeout_seconds=))


class WorkerLostError(RuntimeError):
    """A worker of a multi-worker job died, stopped answering, or did not arrive where every
    worker must (a step, a cross-worker read, a checkpoint save) within the bound."""

    def __init__(self, message: str, lost=()):
        super().__init__(message)
        self.lost = tuple(lost)


_latest: "WorkerRuntime | None" = None  # this process's newest runtime (all share the job's peers)


def current() -> "WorkerRuntime | None":
    """The runtime of this process's multi-worker job, or None in a one-process program."""
    return _latest


class WorkerRuntime:
    """This process's view of the job: who the workers are, and the bound on each step."""

    def __init__(self, peers: Peers, timeout_seconds: float | None, server=None,
                 heartbeat_seconds: float = HEARTBEAT_TIMEOUT_S):
        self.peers, self.timeout, self.heartbeat = peers, timeout_seconds, heartbeat_seconds
        self._last_heard = {i: time.monotonic() for i in peers.others}  # when each peer last answered
        self._server = server  # answers pings (kept alive with the runtime)
        self._exit_code = 0  # non-zero once this worker knows the job cannot go on
        self._started: set = set()
        self._inflight = False  # a step is running
        self._next_check = 0.0  # when the watchdog pings the peers next
        self._step_started = 0.0  # when the step in flight began
        self._deadline: float | None = None  # when the step in flight outlives its bound
        self._cond = threading.Condition()
        global _latest
        _latest = self
        start_watcher(peers)
        atexit.register(self._exit_if_failed)  # runs before jax.distributed's shutdown barrier
        threading.Thread(target=self._watch, name="strategax-watchdog", daemon=True).start()

    def lost_worker_error(self, what: str) -> WorkerLostError | None:
        """After `what` failed: a WorkerLostError naming the lost peers (also printed, and this
        process will exit non-zero), or None when every peer answers."""
        dead, slow = self.peers.find_lost()
        if not dead and not slow:
            return None
        return self.named_error(what, dead, slow)

    def named_error(self, what: str, dead, slow=(), absent=()) -> WorkerLostError:
        """The WorkerLostError naming these peers (printed; this process will exit non-zero)."""
        message = self.peers.lost_message(what, dead, slow, absent)
        self.fail()
        print(message, file=sys.stderr, flush=True)
        return WorkerLostError(message, [*dead, *slow, *absent])

    def late_error(self, what: str, late) -> WorkerLostError:
        """The WorkerLostError for peers that did not arrive in time: dead, silent or elsewhere."""
        states = self.peers.probe_all()
        return self.named_error(what, [i for i in late if states[i] == "dead"],
                                [i for i in late if states[i] == "unresponsive"],
                                [i for i in late if states[i] == "alive"])

    def fail(self, code: int = 1) -> None:
        """The job cannot go on: this process exits with `code`, skipping JAX's shutdown barrier."""
        self._exit_code = self._exit_code or code

    # --- bounding a step ------------------------------------------------------------------
    def call(self, fn: Callable, key):
        """Run one step (or any program every worker runs) and wait for it; a failed collective
        raises WorkerLostError."""
        bound = None
        if self.timeout is not None:
            bound = self.timeout + (STARTUP_SLACK_S if key not in self._started else 0.0)
        with self._cond:
            now = time.monotonic()
            self._inflight, self._step_started = True, now
            self._deadline = None if bound is None else now + bound
            self._cond.notify()
        try:
            return jax.block_until_ready(fn())
        except Exception as e:
            if not _collective_failure(e):
                raise
            lost = self.lost_worker_error(f"a collective failed ({_first_line(e)})")
            if lost is None:
                raise
            raise lost from None  # the collective's own error says less than the message
        finally:
            with self._cond:
                self._inflight, self._deadline = False, None
            self._started.add(key)

    def _watch(self) -> None:
        """Every CHECK_S: ping the peers; one silent for the heartbeat timeout ends this worker,
        named. While a step runs, a dead peer ends it too, and so does the step's bound."""
        while True:
            with self._cond:
                now = time.monotonic()
                wake = self._next_check if self._deadline is None else min(self._next_check, self._deadline)
                if now < wake:
                    self._cond.wait(wake - now)
                    continue
                deadline, self._next_check = self._deadline, now + CHECK_S
            if deadline is not None and now >= deadline:
                self._die(f"a step did not finish within timeout_seconds={self.timeout:g} (CommunicationOptions)")
            states = self.peers.probe_all()
            now = time.monotonic()
            for i, state in states.items():
                if state == "alive":
                    self._last_heard[i] = now
            silent = [i for i, s in states.items()
                      if s == "unresponsive" and now - self._last_heard[i] >= self.heartbeat]
            if silent:
                self._die_hung(silent)
            dead = [i for i, s in states.items() if s == "dead"]
            with self._cond:  # a step past CHECK_S: a peer that died after finishing it is no fault
                running = self._inflight and now - self._step_started >= CHECK_S
            if dead and running:
                self._die("a step could not finish", dead)

    def _die_hung(self, silent: list[int]) -> None:
        """Peers alive but silent past the heartbeat timeout: name them and exit 1 (JAX's own
        heartbeat check, set longer, would abort this process with SIGABRT later)."""
        who = "; ".join(f"worker {i} stopped responding (no heartbeat for {self.heartbeat:g} s): "
                        f"{self.peers.describe(i)} is hung or stopped" for i in silent)
        print(f"WorkerLostError: {self.peers.me()}: {who}. {RESTART}", file=sys.stderr, flush=True)
        stand_down()
        if self.peers.index == 0:  # the coordinator goes last: its end makes JAX abort the others
            self._await_exit([i for i in self.peers.others if i not in silent], SURVIVORS_EXIT_S)
        os._exit(1)

    def _await_exit(self, peers: list[int], limit: float) -> None:
        """Wait (at most `limit` seconds) until `peers` are gone: they found the fault too."""
        deadline = time.monotonic() + limit
        while peers and time.monotonic() < deadline:
            peers = [i for i in peers if probe(self.peers.addresses[i], ping=True, timeout=0.5) != "dead"]
            time.sleep(0.1)

    def _die(self, what: str, dead=None) -> None:
        """Name the lost peers and exit: the step is stuck inside XLA, nothing here can unblock it."""
        if dead is None:
            dead, slow = self.peers.find_lost()
        else:
            slow = []
        print(f"WorkerLostError: {self.peers.lost_message(what, dead, slow)}", file=sys.stderr, flush=True)
        stand_down()
        os._exit(1)

    def _exit_if_failed(self) -> None:
        if self._exit_code:  # skip jax.distributed's shutdown barrier: a peer can never reach it
            sys.stdout.flush()
            sys.stderr.flush()
            stand_down()
            os._exit(self._exit_code)


def _collective_failure(e: Exception) -> bool:
    """An error of the runtime under a program (jaxlib raises gloo's failures as ValueError)."""
    return isinstance(e, jax.errors.JaxRuntimeError) or "gloo" in str(e).lower()


def _first_line(e: Exception) -> str:
    """The cause in short: gloo's reason without its source location and address."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if "gloo" in text.lower() and "] " in text:
        return "gloo: " + re.sub(r"\s*\[[^\]]*\]:\d+", "", text.split("] ", 1)[1])[:200]
    return text[:200]

"""Bounded exchanges between the workers outside compiled programs (a checkpoint save agreeing
on its folder and number, an input pipeline agreeing on each step's row counts), on the key-value
store of JAX's coordination service rather than a collective: waiting costs no compiled program,
a worker that does not arrive is known by name, and the wait can stop.

A wait ends with the peers' values; with `WorkerLostError` naming a peer that died (the peers
are pinged every CHECK_S) or, past its bound, the peers that did not arrive; with `Preempted`
once a preemption notice (SIGTERM to any worker, which JAX's preemption service catches and
records as NOTICE_KEY) has come while this worker waited more than CHECK_S; or with `Cancelled`
when the caller's `cancelled()` says so (a dropped input iterator).
"""
from __future__ import annotations

import contextlib
import sys
import time
from typing import Callable

import jax

from .runtime import CHECK_S, WorkerRuntime

NOTICE_KEY = "RECEIVED_PREEMPTION_NOTICE"  # written by JAX's preemption sync manager (tsl's kPreemptionNoticeKey)
SLICE_MS = 200  # one blocking read of the store: how often the wait looks at the clock
PREEMPTED_CODE = 143  # 128 + SIGTERM: what SIGTERM's default action reports
_preemption_saves = 0  # > 0 while a PreemptionCheckpointHandler saves: its notice must not stop it


class Cancelled(Exception):
    """The caller gave up the wait (its `cancelled()` turned true)."""


class Preempted(SystemExit):
    """A preemption notice (SIGTERM) came while this worker waited for the others: it stops, as
    SIGTERM would stop a process that JAX had not told to catch it (exit status 143)."""

    def __init__(self, message: str):
        super().__init__(PREEMPTED_CODE)
        self.message = message

    def __str__(self) -> str:
        return self.message


@contextlib.contextmanager
def preemption_save():
    """Waits inside this block ignore the preemption notice (they are the save it asks for)."""
    global _preemption_saves
    _preemption_saves += 1
    try:
        yield
    finally:
        _preemption_saves -= 1


def _client():
    """The coordination service's client: a `WorkerRuntime` exists only once the workers joined it."""
    from jax._src import distributed

    client = distributed.global_state.client
    assert client is not None, "the workers exchange values only once jax.distributed is initialized"
    return client


class Channel:
    """A sequence of exchanges that every worker makes in the same order under one `name`."""

    def __init__(self, name: str):
        self._name, self._round = name, 0

    def all_gather(self, runtime: WorkerRuntime, value: str, what: str, timeout: float | None,
                   cancelled: Callable[[], bool] | None = None) -> list[str]:
        """Every worker's `value`, in worker order. `what` names the wait in messages; past
        `timeout` seconds (None: no bound, only lost workers and the notice end it) the peers
        that have not arrived are named."""
        peers, client = runtime.peers, _client()
        prefix = f"strategax/{self._name}/{self._round}/"
        self._round += 1
        client.key_value_set(prefix + str(peers.index), value)
        got = wait_for(runtime, {i: prefix + str(i) for i in peers.others}, what, timeout, cancelled)
        got[peers.index] = value
        if self._round >= 2:  # the peers set this round's keys after reading the last round's
            with contextlib.suppress(jax.errors.JaxRuntimeError):
                client.key_value_delete(f"strategax/{self._name}/{self._round - 2}/{peers.index}")
        return [got[i] for i in range(len(peers.addresses))]


_channels: dict[str, Channel] = {}
_counts: dict[str, int] = {}


def channel(name: str) -> Channel:
    """This process's channel `name` (every worker has its own, in step with the others')."""
    return _channels.setdefault(name, Channel(name))


def new_channel(prefix: str) -> Channel:
    """A channel of its own for the next user of `prefix` (e.g. each input iterator): the
    workers must create them in the same order."""
    _counts[prefix] = _counts.get(prefix, -1) + 1
    return Channel(f"{prefix}-{_counts[prefix]}")


def wait_for(runtime: WorkerRuntime, keys: dict[int, str], what: str, timeout: float | None,
             cancelled: Callable[[], bool] | None = None) -> dict[int, str]:
    """The value of `keys[i]` (set by worker i) for each i, waited for as the module says."""
    client, peers = _client(), runtime.peers
    start = time.monotonic()
    deadline = None if timeout is None else start + timeout
    next_check = start + CHECK_S
    got: dict[int, str] = {}
    while len(got) < len(keys):
        for i in [i for i in keys if i not in got]:
            try:
                got[i] = client.blocking_key_value_get(keys[i], SLICE_MS)
            except jax.errors.JaxRuntimeError as e:
                if "DEADLINE_EXCEEDED" not in str(e):  # the coordination service failed
                    lost = runtime.lost_worker_error(f"{what} failed ({str(e).splitlines()[0][:200]})")
                    if lost is None:
                        raise
                    raise lost from None
                break  # look at the clock before waiting on the next key
        if len(got) == len(keys):
            break
        if cancelled is not None and cancelled():
            raise Cancelled(what)
        now = time.monotonic()
        if now >= next_check:
            next_check = now + CHECK_S
            dead = [i for i, s in peers.probe_all().items() if s == "dead"]
            if dead:
                raise runtime.named_error(what, dead)
            if not _preemption_saves and _noticed(client):
                missing = ", ".join(peers.describe(i) for i in keys if i not in got)
                message = (f"{peers.me()}: a preemption notice (SIGTERM) came while this worker waited in "
                           f"{what} for {missing}: stopping. Restart the job (from the last checkpoint).")
                print(message, file=sys.stderr, flush=True)
                runtime.fail(PREEMPTED_CODE)
                raise Preempted(message)
        if deadline is not None and now >= deadline:
            raise runtime.late_error(f"{what} waited {timeout:g} s", [i for i in keys if i not in got])
    return got


def _noticed(client) -> bool:
    try:
        client.key_value_try_get(NOTICE_KEY)
        return True
    except jax.errors.JaxRuntimeError:
        return False

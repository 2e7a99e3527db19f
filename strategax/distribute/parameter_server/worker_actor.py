"""The worker actor of a parameter-server job (a Ray actor: one process, one scheduled function
at a time). It imports JAX, so the actor's environment sets its device count first."""
from __future__ import annotations

import os

import jax

from .worker_runtime import WorkerRuntime


class Worker:
    """Runs scheduled functions for the coordinator (see `worker_runtime`)."""

    def __init__(self, index: int, num_workers: int, servers: list, timeout: float):
        self.runtime = WorkerRuntime(index, num_workers, servers, timeout)

    def ready(self) -> tuple[int, int]:
        """(local replicas, process id), once the worker can run functions."""
        return len(jax.local_devices()), os.getpid()

    def run(self, closure_id: int, token: int, holder: list, args_blob: bytes):
        return self.runtime.run(closure_id, token, holder, args_blob)

    def make_resource(self, resource_id: int, kind: str, payload) -> None:
        self.runtime.make_resource(resource_id, kind, payload)

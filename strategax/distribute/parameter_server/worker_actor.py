"""The worker actor of a parameter-server job (a Ray actor: one process, one scheduled function
at a time, each coming through the coordinator's direct channel, `cluster/channel.py`). It
imports JAX, so its process sets its device count (XLA_FLAGS) first.

The class is made by `worker_class()` so that Ray ships it by value: the actor's process
imports nothing of strategax (hence JAX) before `__init__` has set the flags, and the actor
needs no Ray `runtime_env` (which starts its process through Ray's runtime-env agent: seconds
on a loaded machine, where a plain actor takes one of the processes Ray keeps started)."""
from __future__ import annotations


def worker_class():
    """The actor class (defined here, inside a function, so that it pickles by value)."""
    import os

    class Worker:
        """Runs scheduled functions for the coordinator (see `worker_runtime`)."""

        def __init__(self, env: dict, devices: int | None, index: int, num_workers: int, num_ps: int,
                     authkey: bytes, timeout: float):
            os.environ.update(env)  # before JAX is imported (the check in `ready` catches a process that had)
            from strategax.distribute.parameter_server.worker_runtime import WorkerRuntime

            self.devices = devices
            self.runtime = WorkerRuntime(index, num_workers, num_ps, authkey, timeout)

        def ready(self, server_addresses: list) -> tuple[int, int, tuple]:
            """(local replicas, process id, the address the coordinator connects to), once the
            worker can run functions; `server_addresses`: the parameter servers' channels."""
            import jax

            count = len(jax.local_devices())
            if self.devices is not None and count != self.devices:
                raise RuntimeError(f"the worker's process has {count} devices, not {self.devices}: JAX was "
                                   "imported in it before its XLA_FLAGS were set")
            return count, os.getpid(), self.runtime.start(server_addresses)

        def make_resource(self, resource_id: int, kind: str, payload) -> None:
            self.runtime.make_resource(resource_id, kind, payload)

    return Worker

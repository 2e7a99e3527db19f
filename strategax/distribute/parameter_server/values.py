"""What a coordinator hands back: `RemoteValue` (a scheduled function's result, when it comes),
`PerWorkerValues` (one value per worker: given to `schedule`, worker i gets value i) and the
per-worker datasets and iterators made on every worker (TensorFlow's names and behaviour)."""
from __future__ import annotations

import threading
from typing import Any, Callable

from . import current
from .errors import ClosureCancelledError, ParameterServerLostError


class Failure:
    """Why a scheduled function has no result; `error()` is raised at the user's line."""

    def __init__(self, make: Callable[[], BaseException], fatal: bool = False):
        self._make = make
        self.fatal = fatal  # every function still queued fails with it too (a lost server)

    def error(self) -> BaseException:
        return self._make()

    @classmethod
    def raised(cls, error: BaseException) -> "Failure":
        return cls(lambda: error)

    @classmethod
    def server_lost(cls, message: str) -> "Failure":
        return cls(lambda: ParameterServerLostError(
            f"{message}; its variables are gone", "restart training from the last checkpoint "
            "(sx.Checkpoint / sx.CheckpointManager): a lost parameter server cannot be recovered"), fatal=True)

    @classmethod
    def cancelled(cls, cause: "Failure") -> "Failure":
        if cause.fatal:
            return cause

        def make():
            first = cause.error()
            return ClosureCancelledError(
                f"this scheduled function did not run: an earlier one failed ({type(first).__name__}: "
                f"{str(first).splitlines()[0][:200]})",
                "handle the error coordinator.join() raised, then schedule again")
        return cls(make)


class RemoteValue:
    """The result of `coordinator.schedule(fn)`: `fetch()` waits for it and returns it (arrays as
    NumPy); `get()` is the same. If the function failed, both raise its error."""

    def __init__(self):
        self._done = threading.Event()
        self._value: Any = None
        self._failure: Failure | None = None

    def _set(self, value) -> None:
        self._value = value
        self._done.set()

    def _fail(self, failure: Failure) -> None:
        self._failure = failure
        self._done.set()

    def fetch(self):
        self._done.wait()
        if self._failure is not None:
            raise self._failure.error()
        return self._value

    get = fetch

    def __repr__(self) -> str:
        state = "pending" if not self._done.is_set() else ("failed" if self._failure else "done")
        return f"<RemoteValue {state}>"


class PerWorkerValues:
    """One value per worker; passed to `schedule`, the worker that runs the function gets its own."""

    def __init__(self, values):
        self._values = tuple(values)

    @property
    def values(self) -> tuple:
        return self._values

    def __repr__(self) -> str:
        return f"PerWorkerValues({self._values!r})"


class WorkerResource:
    """A per-worker object (a dataset or an iterator) by id: in a worker, that worker's own."""

    def __init__(self, resource_id: int):
        self.id = resource_id

    def __reduce__(self):
        return current.worker_resource, (self.id,)


class PerWorkerDataset:
    """`coordinator.create_per_worker_dataset(fn)`: a dataset made on every worker; `iter()` it
    for a per-worker iterator to pass to scheduled functions (`next(iterator)` inside them)."""

    def __init__(self, coordinator, resource_id: int):
        self._coordinator, self._id = coordinator, resource_id

    def __iter__(self) -> "PerWorkerIterator":
        return PerWorkerIterator(self._coordinator._make_resource("iterator", self._id),
                                 self._coordinator._strategy._cluster.num_workers)


class PerWorkerIterator(PerWorkerValues):
    """Each worker's iterator over its own dataset."""

    def __init__(self, resource_id: int, num_workers: int):
        super().__init__([WorkerResource(resource_id)] * num_workers)

    def __next__(self):
        raise TypeError("a per-worker iterator gives batches inside scheduled functions only: call "
                        "next(iterator) in the function passed to coordinator.schedule")

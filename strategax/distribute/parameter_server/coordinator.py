"""`ClusterCoordinator`: schedules functions on whichever worker is free, as TensorFlow's.

`schedule` queues a function and returns a `RemoteValue` at once; one thread per worker takes
the next function, sends it to that worker through its direct channel (`cluster/channel.py`: the
function's code with its first run there, then only its arguments) and hands back its result.
A worker that dies (its process killed, or its channel broken) gives its function back to the
queue, to run on another worker, and is started again
(its per-worker datasets made anew); a worker that raises makes `join()` raise that error and
cancels the functions still queued; a lost parameter server makes `join()`/`fetch()` raise
`ParameterServerLostError`."""
from __future__ import annotations

import collections
import itertools
import logging
import pickle
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, cast

import jax

from ...cluster.ray import cloudpickle, dumps, ray_module
from ...errors import DistributionTypeError, check_callable, check_mapping
from .errors import WorkersLostError
from .messages import Done, Raised, Resource, RunOutcome, ServerLost
from .strategy import ParameterServerStrategy
from .values import Failure, PerWorkerDataset, PerWorkerValues, RemoteValue

log = logging.getLogger("strategax")
MAX_RESTARTS = 3  # times a worker is started again after it dies
PIPELINE = 2  # functions queued at a worker at once (one runs, the next waits there)
_CLOSURE_IDS = itertools.count()
_STOP = object()
_NO_ARGUMENTS = pickle.dumps(((), {}))  # what a function without arguments gets


@dataclass
class _Work:
    """The queue the workers' threads take functions from (they hold it, and the coordinator
    only weakly, so that an unused strategy is collected and its actors stopped)."""
    cond: threading.Condition = field(default_factory=threading.Condition)
    queue: collections.deque = field(default_factory=collections.deque)
    in_flight: int = 0
    stopped: bool = False

    def take(self, wait: bool):
        """The next closure (waiting for one if `wait`), None when there is none, or _STOP."""
        with self.cond:
            while wait and not self.queue and not self.stopped:
                self.cond.wait()
            if self.stopped:
                return _STOP
            if not self.queue:
                return None
            self.in_flight += 1
            return self.queue.popleft()

    def stop(self) -> None:
        """The workers' threads end (the coordinator stopped, or was collected)."""
        with self.cond:
            self.stopped = True
            self.cond.notify_all()


def _serve(coordinator_ref: weakref.ref, work: _Work, index: int) -> None:
    """Worker `index`'s thread: keeps up to PIPELINE functions queued at that worker (Ray runs an
    actor's calls in order, so the next one starts as the last ends, without waiting for the
    coordinator's round trip), hands back their results in order, until the coordinator stops
    or is gone. A function whose arguments wait for a result not yet back is sent once the
    functions in flight here are done (their results may be the ones it waits for)."""
    restarts = [0]
    in_flight: collections.deque = collections.deque()  # closures sent, their outcomes awaited in order
    held = None  # a closure taken, sent after the ones in flight
    while True:
        while held is None and len(in_flight) < PIPELINE:
            closure = work.take(wait=not in_flight)
            if closure is _STOP:
                return
            if closure is None:
                break
            if in_flight and not _arguments_ready(closure):
                held = closure
                break
            if not _send(coordinator_ref, closure, index, in_flight):
                return
        if in_flight:
            coordinator = coordinator_ref()
            if coordinator is None or not coordinator._collect(index, in_flight, restarts):
                return
            del coordinator
        elif held is not None:
            closure, held = held, None
            if not _send(coordinator_ref, closure, index, in_flight):
                return
        elif coordinator_ref() is None:
            return


def _send(coordinator_ref: weakref.ref, closure, index: int, in_flight: collections.deque) -> bool:
    """Send `closure` to worker `index` (False when the coordinator is gone)."""
    coordinator = coordinator_ref()
    if coordinator is None:
        return False
    if coordinator._submit(closure, index):
        in_flight.append(closure)
    return True


def _arguments_ready(closure) -> bool:
    """Whether every RemoteValue among `closure`'s arguments has its result (or failure)."""
    leaves = jax.tree_util.tree_leaves((closure.args, closure.kwargs), is_leaf=_is_value_leaf)
    return all(x._done.is_set() for x in leaves if isinstance(x, RemoteValue))


@dataclass
class Closure:
    """A scheduled function: what to run, and where its result goes."""
    token: int  # the function's id (its pickled code: the coordinator's `_functions[token]`)
    args: tuple
    kwargs: dict
    value: RemoteValue = field(default_factory=RemoteValue)
    id: int = field(default_factory=lambda: next(_CLOSURE_IDS))


def _is_value_leaf(x) -> bool:
    return isinstance(x, (PerWorkerValues, RemoteValue))


class ClusterCoordinator:
    """Schedules functions on the workers of a ParameterServerStrategy (one per strategy)."""

    def __new__(cls, strategy):
        if not isinstance(strategy, ParameterServerStrategy):
            raise DistributionTypeError(f"ClusterCoordinator takes a ParameterServerStrategy, not {strategy!r:.80}",
                                        "pass sx.experimental.ParameterServerStrategy(resolver)")
        if strategy._coordinator is None:
            strategy._coordinator = super().__new__(cls)
            strategy._coordinator._start(strategy)
        return strategy._coordinator

    def _start(self, strategy) -> None:
        self._strategy, self._cluster = strategy, strategy._cluster
        self._work = _Work()
        self._failure: Failure | None = None  # the first failure since join() last raised
        self._functions: dict[int, tuple[Any, bytes]] = {}  # id(fn) -> (fn, its pickled code)
        self._sent: list[set] = [set() for _ in range(self._cluster.num_workers)]  # tokens each worker has
        self._resources: list[Resource] = []  # made on every worker, in order
        self._resource_lock = threading.Lock()
        self._resource_ids = itertools.count()
        self._serving = self._cluster.num_workers
        self._rescheduled = 0  # functions run again after their worker died
        weakref.finalize(self, self._work.stop)  # wakes the threads waiting for work: they end
        for i in range(self._cluster.num_workers):  # (a weak reference: the strategy can be collected)
            threading.Thread(target=_serve, args=(weakref.ref(self), self._work, i),
                             name=f"strategax-ps-worker-{i}", daemon=True).start()

    @property
    def strategy(self) -> ParameterServerStrategy:
        return self._strategy

    # --- the user's API ------------------------------------------------------------------------------
    def schedule(self, fn, args=None, kwargs=None) -> RemoteValue:
        """Queue `fn(*args, **kwargs)` to run on a free worker; returns its RemoteValue at once."""
        check_callable(fn, "schedule's fn", "pass the step function: coordinator.schedule(step_fn, args=(it,))")
        if args is not None and not isinstance(args, (tuple, list)):
            raise DistributionTypeError(f"schedule's args must be a tuple or list, not {type(args).__name__}",
                                        "wrap a single argument as args=(x,)")
        check_mapping(kwargs, "schedule's kwargs", "pass keyword arguments as kwargs={'name': value}")
        self._raise_failure()
        token = id(fn)
        if token not in self._functions:
            self._functions[token] = (fn, dumps(fn))
        closure = Closure(token, tuple(args or ()), dict(kwargs or {}))
        with self._work.cond:
            self._work.queue.append(closure)
            self._work.cond.notify_all()
        return closure.value

    def join(self) -> None:
        """Wait until every scheduled function has run; raise the first error one raised."""
        with self._work.cond:
            while self._work.queue or self._work.in_flight:
                self._work.cond.wait()
        self._raise_failure()

    def done(self) -> bool:
        """Whether every scheduled function has run (raises the first error, as join)."""
        with self._work.cond:
            finished = not self._work.queue and not self._work.in_flight
        self._raise_failure()
        return finished

    def fetch(self, val):
        """`val` with every RemoteValue fetched (a PerWorkerValues: a tuple, one per worker)."""
        def one(x):
            if isinstance(x, PerWorkerValues):
                return tuple(one(v) for v in x.values)
            return x.fetch() if isinstance(x, RemoteValue) else x
        return jax.tree_util.tree_map(one, val, is_leaf=_is_value_leaf)

    def create_per_worker_dataset(self, dataset_fn) -> PerWorkerDataset:
        """Make `dataset_fn()` (or a dataset) on every worker, distributed over its replicas."""
        return PerWorkerDataset(self, self._make_resource("dataset", dumps(dataset_fn)))

    def _make_resource(self, kind: str, payload) -> int:
        ray = ray_module()
        with self._resource_lock:
            resource_id = next(self._resource_ids)
            self._resources.append(Resource(resource_id, kind, payload))
            calls = [w.make_resource.remote(resource_id, kind, payload) for w in self._cluster.workers]
            for call in calls:
                try:
                    ray.get(call)
                except ray.exceptions.RayActorError:
                    pass  # a dead worker: its replacement makes it
                except ray.exceptions.RayTaskError as e:
                    raise (e.cause if isinstance(e.cause, BaseException) else e) from None
        return resource_id

    # --- the workers' threads -----------------------------------------------------------------------------
    def _raise_failure(self) -> None:
        with self._work.cond:
            failure, self._failure = self._failure, None
        if failure is not None:
            raise failure.error()

    def _done_with(self, closure: Closure, failure: Failure | None = None, again: bool = False) -> None:
        with self._work.cond:
            self._work.in_flight -= 1
            if again:
                self._rescheduled += 1
                self._work.queue.appendleft(closure)
            elif failure is not None:
                closure.value._fail(failure)
                if self._failure is None:
                    self._failure = failure
                for queued in self._work.queue:
                    queued.value._fail(Failure.cancelled(failure))
                self._work.queue.clear()
            self._work.cond.notify_all()

    def _arguments(self, closure: Closure, worker: int) -> bytes:
        if not closure.args and not closure.kwargs:
            return _NO_ARGUMENTS

        def one(x):
            if isinstance(x, PerWorkerValues):
                return x.values[worker]
            return x.fetch() if isinstance(x, RemoteValue) else x
        return dumps(jax.tree_util.tree_map(one, (closure.args, closure.kwargs), is_leaf=_is_value_leaf))

    def _submit(self, closure: Closure, index: int) -> bool:
        """Send `closure` to worker `index` (with the function's code, the first time there);
        False when its arguments cannot travel (it failed). A send to a dead worker is not an
        error here: reading its outcome is, and gives the function back to the queue."""
        try:
            blob = self._arguments(closure, index)
        except Exception as e:  # noqa: BLE001 - an argument that cannot travel fails its function
            self._done_with(closure, Failure.raised(e))
            return False
        sent = self._sent[index]
        code = None if closure.token in sent else self._functions[closure.token][1]
        sent.add(closure.token)
        try:
            self._cluster.channels[index].send_bytes(pickle.dumps((closure.id, closure.token, code, blob), protocol=5))
        except OSError:
            pass
        return True

    def _collect(self, index: int, in_flight: collections.deque, restarts: list) -> bool:
        """Wait for the oldest function in flight at worker `index`; False when that worker is
        lost for good. A dead worker (its channel closed) gives every function it had back to
        the queue, in order."""
        closure = in_flight.popleft()
        try:
            answer = self._cluster.channels[index].recv_bytes()
        except (EOFError, OSError):  # the worker died: its functions run elsewhere
            for queued in reversed(in_flight):
                self._done_with(queued, again=True)
            in_flight.clear()
            self._done_with(closure, again=True)
            if self._work.stopped:
                return False
            while restarts[0] < MAX_RESTARTS:  # a start that fails (a busy node, say) is tried again
                restarts[0] += 1
                error = self._restart(index)
                if error is None:
                    return True
                log.warning("strategax: worker %d of the parameter-server job could not be started again "
                            "(attempt %d of %d): %s", index, restarts[0], MAX_RESTARTS, error)
            self._lost_worker()
            return False
        try:
            outcome: RunOutcome = cast(RunOutcome, pickle.loads(answer))
        except Exception as e:  # noqa: BLE001 - a result this process cannot unpickle fails its function
            self._done_with(closure, Failure.raised(e))
            return True
        self._finish(closure, outcome)
        return True

    def _finish(self, closure: Closure, outcome: RunOutcome) -> None:
        for group in outcome.created:
            self._strategy._adopt_slots(group.uid, group.var_keys, group.slot_refs)
        match outcome:
            case Done(result=result):
                closure.value._set(result)
                self._done_with(closure)
            case ServerLost(message=message):
                self._done_with(closure, Failure.server_lost(message))
            case Raised(error=error):
                self._done_with(closure, Failure.raised(cloudpickle().loads(error)))

    def _restart(self, index: int) -> str | None:
        """Start worker `index` again and make its per-worker datasets; what went wrong if it
        could not start, else None."""
        ray = ray_module()
        try:
            worker, conn = self._cluster.restart_worker(index)
            with self._resource_lock:
                ray.get([worker.make_resource.remote(*r) for r in self._resources])
                self._cluster.workers[index], self._cluster.channels[index] = worker, conn
                self._sent[index] = set()
        except Exception as e:  # noqa: BLE001 - the worker stays lost (the caller may try again)
            return f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        return None

    def _lost_worker(self) -> None:
        with self._work.cond:
            self._serving -= 1
            if self._serving == 0 and self._failure is None and not self._work.stopped:
                failure = Failure(lambda: WorkersLostError(
                    "every worker of the parameter-server job died and could not be started again",
                    "check the Ray cluster's nodes (`ray status`), then restart from the last checkpoint"))
                self._failure = failure
                for queued in self._work.queue:
                    queued.value._fail(failure)
                self._work.queue.clear()
            self._work.cond.notify_all()

    def _stop(self) -> None:
        self._work.stop()

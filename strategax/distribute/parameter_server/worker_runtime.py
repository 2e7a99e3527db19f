"""A worker of a parameter-server job: runs the coordinator's scheduled functions on its local
devices. Per function: its variables are fetched from the parameter servers when first used
(`shadow`), the function runs (a `strategy.function` compiles once per worker), and its updates
go back to the servers, each server applying all of one function's updates in one atomic call,
once per closure id (a function run again after its first worker died after sending adds
nothing twice). The functions come from the coordinator, and the reads and updates go to the
servers, through direct channels (`cluster/channel.py`), not Ray calls."""
from __future__ import annotations

import contextlib
import pickle
import threading
from typing import Any, Callable

import jax
import numpy as np

from ... import _context
from ..._markers import is_variable
from ...cluster.ray import cloudpickle, dumps
from ...errors import DistributionRuntimeError
from ...input import DatasetsFromFunction, DistributedDataset
from ...trace.distributed_values import DistributedValues, is_distributed
from ...variables import Variable
from ...cluster import channel
from . import current
from .messages import Done, Raised, RunOutcome, ServerLost as ServerLostReport, SlotGroup, Update
from .remote_buffer import VarRef
from .shadow import RecordBuffer, ShadowBuffer, store
from .worker_optimizer import WorkerOptimizer
from .worker_strategy import WorkerStrategy


class ServerLost(Exception):
    """A parameter server did not answer (reported to the coordinator, which names it)."""

    def __init__(self, ps: int, cause: BaseException):
        text = (str(cause).splitlines() or ["the connection closed"])[0][:200]  # an EOFError has no text
        super().__init__(f"parameter server {ps} is lost ({type(cause).__name__}: {text})")
        self.ps = ps


def _to_host(tree):
    """A function's result as NumPy (what `RemoteValue.fetch` returns)."""
    def one(x):
        if is_variable(x):
            return np.asarray(x.read_value())
        if isinstance(x, DistributedValues):
            return type(x)(tuple(np.asarray(c) for c in x.values))
        return np.asarray(x) if isinstance(x, (jax.Array, np.ndarray, np.generic)) else x
    return jax.tree_util.tree_map(one, tree, is_leaf=lambda x: is_distributed(x) or is_variable(x))


class WorkerRuntime:
    """The state of one worker actor: its strategy, its copies of the servers' variables, the
    functions and per-worker resources it was given."""

    def __init__(self, index: int, num_workers: int, num_ps: int, authkey: bytes, timeout: float):
        self.index, self.num_workers, self.num_ps, self.timeout = index, num_workers, num_ps, timeout
        self.authkey = authkey
        self.servers: list = []  # a channel to each parameter server, once `start` connected them
        self.lock = threading.Lock()  # one scheduled function or resource at a time (as Ray ran them)
        current.register(self)
        self.strategy = WorkerStrategy(self)
        self.step = 0  # which scheduled function runs (copies fetched in another are stale)
        self.shadows: dict[tuple, Variable] = {}  # (ps, id) -> this worker's copy
        self.optimizers: dict[int, WorkerOptimizer] = {}
        self.functions: dict[int, Callable] = {}
        self.used: dict[int, set] = {}  # function token -> the copies its last run used (fetched up front)
        self.resources: dict[int, Any] = {}  # per-worker datasets and their iterators
        self.created: list[SlotGroup] = []  # slot groups made in this function, reported to the coordinator
        self._making = None  # what the variable being made is: ("copy", ref), ("slot", ...), ("record",)

    # --- variables ------------------------------------------------------------------------------
    def buffer_for(self, var, initial):
        """The storage of a variable made in this worker (see WorkerStrategy._var_buffer)."""
        making = self._making
        if making is None:
            raise DistributionRuntimeError(
                f"variable {var.name!r} was created inside a scheduled function",
                "create variables on the coordinator, in `with strategy.scope():`, before scheduling")
        if making[0] == "record":
            return RecordBuffer(var, initial)
        if making[0] == "copy":
            return ShadowBuffer(var, initial, self, making[1])
        uid, refs, owners, made = making[1:]
        owner = owners[len(made)]
        ps = refs[0 if owner is None else owner].ps
        key = (uid, tuple(r.key for r in refs), len(made))
        var_id, existing = self._call(ps, "create", np.asarray(initial), key)
        ref = VarRef.of(var, ps, var_id)
        made.append(ref)
        buffer = ShadowBuffer(var, initial if existing is None else existing, self, ref)
        buffer.step = self.step
        return buffer

    @contextlib.contextmanager
    def _as(self, making):
        saved, self._making = self._making, making
        try:
            with _context.push(self.strategy):
                yield
        finally:
            self._making = saved

    def _attach_records(self, var: Variable) -> Variable:
        """The `delta` and `assigned` variables of a copy (see `shadow`)."""
        copy = store(var, ShadowBuffer)
        with self._as(("record",)):
            copy.delta = Variable(np.zeros(var.shape, var.dtype), name=f"{var.name}/delta", trainable=False,
                                  synchronization=var._sync, aggregation=var.aggregation)
            copy.assigned = Variable(np.int32(0), name=f"{var.name}/assigned", trainable=False,
                                     aggregation="only_first_replica")
        self.shadows[copy.ref.key] = var
        return var

    def shadow_of(self, ref) -> Variable:
        """This worker's copy of the variable `ref` (made the first time)."""
        var = self.shadows.get(ref.key)
        if var is None:
            with self._as(("copy", ref)):
                var = Variable(np.zeros(ref.shape, ref.dtype), name=ref.name, dtype=ref.dtype,
                               trainable=ref.trainable, synchronization=ref.sync.lower(),
                               aggregation=ref.aggregation.lower())
            self._attach_records(var)
        return var

    @contextlib.contextmanager
    def creating_slots(self, uid: int, refs: list, owners: list):
        """Variables made inside are optimizer `uid`'s slots for `refs`, in state-leaf order."""
        with self._as(("slot", uid, refs, owners, [])):
            yield

    def slots_created(self, uid: int, refs: list, group) -> None:
        """A slot group was made: its slots get their record variables (a slot this worker
        already has a copy of, from a function pickled after the coordinator adopted it, keeps
        that copy), and the coordinator hears of it."""
        for i, slot in enumerate(group.slots):
            group.slots[i] = self.shadows.get(slot._store.ref.key) or self._attach_records(slot)
        self.created.append(SlotGroup(uid, [r.key for r in refs], [s._store.ref for s in group.slots]))

    def optimizer_of(self, uid: int, *state) -> WorkerOptimizer:
        if uid not in self.optimizers:
            self.optimizers[uid] = WorkerOptimizer.rebuild(self, uid, *state)
        return self.optimizers[uid]

    # --- the channels --------------------------------------------------------------------------------
    def start(self, server_addresses: list) -> tuple:
        """Connect to the parameter servers and listen for the coordinator: its address."""
        self.servers = [channel.connect(a, self.authkey) for a in server_addresses]
        listener = channel.listen(self.authkey)
        channel.serve(listener, self._answer, f"strategax-worker-{self.index}")
        return listener.address

    def _answer(self, payload: bytes) -> bytes:
        """A scheduled function from the coordinator -> its pickled RunOutcome."""
        closure_id, token, fn_blob, args_blob = pickle.loads(payload)
        with self.lock:
            outcome = self.run(closure_id, token, fn_blob, args_blob)
        try:
            return dumps(outcome)
        except Exception as e:  # noqa: BLE001 - a result that cannot travel fails its function
            return dumps(Raised(_pickled(e), outcome.created))

    # --- talking to the parameter servers -----------------------------------------------------------
    def _send(self, ps: int, method: str, *args) -> None:
        try:
            self.servers[ps].send_bytes(pickle.dumps((method, args), protocol=5))
        except OSError as e:
            raise ServerLost(ps, e) from None

    def _receive(self, ps: int):
        conn = self.servers[ps]
        try:
            if not conn.poll(self.timeout):
                raise TimeoutError(f"no answer within {self.timeout:g} s")
            status, value = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError) as e:  # TimeoutError is an OSError
            raise ServerLost(ps, e) from None
        if status != "ok":
            raise DistributionRuntimeError(f"parameter server {ps} refused a request: {value}",
                                           "report this: the worker and server disagree on a variable")
        return value

    def _call(self, ps: int, method: str, *args):
        self._send(ps, method, *args)
        return self._receive(ps)

    def fetch(self, buffers) -> None:
        """Load the servers' current values into `buffers` (one request per server, all sent
        before any answer is awaited)."""
        by_ps: dict[int, list] = {}
        for b in buffers:
            if b.step != self.step:
                by_ps.setdefault(b.ref.ps, []).append(b)
        for ps, bs in by_ps.items():
            self._send(ps, "read", [b.ref.id for b in bs])
        for ps, bs in by_ps.items():
            for b, value in zip(bs, self._receive(ps)):
                b.load(value)

    def note_used(self, buffer) -> None:
        self._used.add(buffer.ref.key)

    def _push(self, closure_id: int) -> None:
        """Send this function's updates: one atomic `apply` per server."""
        updates: dict[int, list[Update]] = {}
        for var in self.shadows.values():
            copy = store(var, ShadowBuffer)
            update = copy.update()
            if update is not None:
                updates.setdefault(copy.ref.ps, []).append(Update(copy.ref.id, *update))
        # plain tuples on the wire: a server process does not import strategax
        for ps, ups in updates.items():
            self._send(ps, "apply", closure_id, [tuple(u) for u in ups])
        for ps in updates:
            self._receive(ps)

    # --- scheduled functions ------------------------------------------------------------------------
    def _function(self, token: int, fn_blob: bytes | None):
        """The function `token` (sent pickled, `fn_blob`, with its first run on this worker)."""
        fn = self.functions.get(token)
        if fn is None:
            if fn_blob is None:
                raise DistributionRuntimeError(f"worker {self.index} was sent function {token} without its code",
                                               "report this: the coordinator lost track of what it sent")
            fn = self.functions[token] = cloudpickle().loads(fn_blob)
        return fn

    def run(self, closure_id: int, token: int, fn_blob: bytes | None, args_blob: bytes) -> RunOutcome:
        """Run a scheduled function: Done, ServerLost or Raised (messages.py)."""
        self.step += 1
        self.created, self._used = [], set()
        for var in self.shadows.values():
            store(var, ShadowBuffer).reset()
        try:
            fn = self._function(token, fn_blob)
            args, kwargs = cloudpickle().loads(args_blob)
            self.fetch([self.shadows[k]._store for k in self.used.get(token, ()) if k in self.shadows])
            with self.strategy.scope():
                result = _to_host(fn(*args, **kwargs))
            self._push(closure_id)
            self.used[token] = self._used
            return Done(result, self.created)
        except ServerLost as e:
            return ServerLostReport(e.ps, str(e), [])
        except Exception as e:  # noqa: BLE001 - handed to the coordinator, which raises it
            return Raised(_pickled(e), self.created)

    def make_resource(self, resource_id: int, kind: str, payload) -> None:
        """A per-worker dataset (`payload`: a pickled dataset_fn) or an iterator of one (its id)."""
        with self.lock:
            self._make_resource(resource_id, kind, payload)

    def _make_resource(self, resource_id: int, kind: str, payload) -> None:
        if kind == "iterator":
            self.resources[resource_id] = iter(self.resources[payload])
            return
        dataset_fn = cloudpickle().loads(payload)
        with self.strategy.scope():
            dataset = dataset_fn() if callable(dataset_fn) else dataset_fn
            if not isinstance(dataset, (DistributedDataset, DatasetsFromFunction)):  # over this worker's replicas
                dataset = self.strategy.experimental_distribute_dataset(dataset)
        self.resources[resource_id] = dataset

    def resource(self, resource_id: int):
        return self.resources[resource_id]


def _pickled(error: BaseException) -> bytes:
    """The error as it can travel (its text in a RuntimeError when it cannot be pickled)."""
    try:
        blob = dumps(error)
        pickle.loads(blob)
        return blob
    except Exception:  # noqa: BLE001
        return dumps(RuntimeError(f"{type(error).__name__}: {error}"))

"""`MultiWorkerMirroredStrategy`: one process per worker on JAX's own distributed runtime.

The cluster comes from a cluster resolver (TF_CONFIG by default). With more than one worker,
the process joins the job once (`cluster.join`: a start-up handshake, then
`jax.distributed.initialize` with worker 0 as coordinator, every socket on the worker's own
TF_CONFIG address, CPU collectives through gloo); the replicas are all devices of all workers
(worker-major), and this process holds, feeds and sees only its own replicas' components.
Variables created in the scope start from worker 0's values.
"""
from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from ..cluster import ClusterResolver, Peers, WorkerRuntime, default_resolver, join
from ..cluster.runtime import HEARTBEAT_TIMEOUT_S
from ..cluster.startup import JOIN_TIMEOUT_S
from ..errors import DistributionRuntimeError, DistributionTypeError, DistributionValueError, check_type
from ..variables.buffers import VarBuffer, first_replica_value
from .extended import StrategyExtended
from .multi_worker_input import MultiWorkerInputMixin
from .options import CommunicationOptions
from .strategy import Strategy

_initialized: tuple | None = None  # (addresses, index, liveness server) this process joined with


def _join(peers: Peers, timeout: float | None, heartbeat: float, join_timeout: float):
    """Join the cluster once per process (`cluster.join`): this worker's liveness server."""
    global _initialized
    if _initialized is not None:
        if _initialized[:2] != (peers.addresses, peers.index):
            raise DistributionRuntimeError(
                f"this process already joined the cluster {list(_initialized[0])} as worker {_initialized[1]}",
                "create every MultiWorkerMirroredStrategy of a process from the same cluster description")
        return _initialized[2]
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        raise DistributionRuntimeError(
            "MultiWorkerMirroredStrategy joins the cluster before JAX starts its backend, but this "
            "process already ran JAX computations (or listed its devices)",
            "create the strategy at the start of the program, before any other JAX call")
    # JAX's coordination service aborts every process once a peer misses heartbeats: let the
    # step bound (timeout_seconds) and strategax's heartbeat timeout fire first, so the survivor
    # names the lost worker itself and exits 1.
    beat = max(math.ceil(timeout) + 10 if timeout is not None else 100, math.ceil(heartbeat) + 30)
    server = join(peers, heartbeat_s=beat, timeout=join_timeout)
    _initialized = (peers.addresses, peers.index, server)
    return server


class MultiWorkerExtended(StrategyExtended):
    """As TensorFlow's: this worker's devices; only the chief (worker 0) checkpoints and
    writes summaries; every worker runs its own copy of the program (between-graph)."""

    experimental_between_graph = True

    @property
    def worker_devices(self) -> tuple:
        s = self._strategy
        return tuple(s._devices[i] for i in s._local_replica_ids)

    @property
    def should_checkpoint(self) -> bool:
        return self._strategy._worker_index == 0

    should_save_summary = should_checkpoint


def _seconds(value, what: str, default: float) -> float:
    """A positive number of seconds (None: `default`)."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DistributionTypeError(f"{what} must be a number of seconds or None, not {type(value).__name__} "
                                    f"{value!r:.40}", f"pass {what}={default:g} (seconds), or leave it out")
    if not value > 0:
        raise DistributionValueError(f"{what} must be positive, not {value!r}",
                                     f"pass a positive number of seconds (the default is {default:g})")
    return float(value)


class MultiWorkerMirroredStrategy(MultiWorkerInputMixin, Strategy):
    """Synchronous data parallelism over the devices of several worker processes.

    strategax's own arguments: `join_timeout_seconds` (default 120) bounds how long a worker
    waits for the others to start; `heartbeat_timeout_seconds` (default 10) is how long a peer
    may not answer before this worker names it hung and exits 1."""

    _shards_optimizer_state = True  # slots split over all replicas of all workers

    def __init__(self, cluster_resolver=None, communication_options: CommunicationOptions | None = None, *,
                 join_timeout_seconds: float | None = None, heartbeat_timeout_seconds: float | None = None):
        join_timeout = _seconds(join_timeout_seconds, "join_timeout_seconds", JOIN_TIMEOUT_S)
        heartbeat = _seconds(heartbeat_timeout_seconds, "heartbeat_timeout_seconds", HEARTBEAT_TIMEOUT_S)
        if cluster_resolver is None:  # TF_CONFIG's, Ray Train's inside a Ray Train worker, or this machine
            cluster_resolver = default_resolver(join_timeout)
        if not isinstance(cluster_resolver, ClusterResolver):
            raise DistributionValueError(
                f"cluster_resolver must be a ClusterResolver, not {type(cluster_resolver).__name__}",
                "pass sx.cluster_resolver.TFConfigClusterResolver() or a SimpleClusterResolver")
        if communication_options is None:
            communication_options = CommunicationOptions()
        check_type(communication_options, CommunicationOptions, "communication_options",
                   "pass sx.CommunicationOptions(...), or leave it out")
        self._cluster_resolver = cluster_resolver
        self._communication_options = communication_options
        addresses = cluster_resolver.worker_addresses()
        self._num_workers = max(1, len(addresses))
        self._worker_index = cluster_resolver.worker_index()
        self._runtime = None
        if self._num_workers > 1:
            peers = Peers.of(addresses, self._worker_index, cluster_resolver.worker_tasks())
            server = _join(peers, communication_options.timeout_seconds, heartbeat, join_timeout)
            self._runtime = WorkerRuntime(peers, communication_options.timeout_seconds, server, heartbeat)
            devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
        else:
            devices = list(jax.local_devices())
        super().__init__(devices)
        self._extended = MultiWorkerExtended(self)

    @property
    def cluster_resolver(self):
        return self._cluster_resolver

    @property
    def _local_replica_ids(self) -> list[int]:
        me = jax.process_index()
        return [i for i, d in enumerate(self._devices) if d.process_index == me]

    def _var_buffer(self, var, initial) -> VarBuffer:
        """A variable created in this scope starts from worker 0's initial value on every worker
        (as TensorFlow broadcasts the chief's), whatever value this worker computed."""
        if self._runtime is not None:
            key = ("initial value", tuple(initial.shape), str(initial.dtype))
            initial = self._across_workers(lambda: first_replica_value(self._mesh, initial), key)
        return VarBuffer(var, initial)

    _executes_directly = False  # every call goes through `_execute`, which bounds and watches it

    def _execute(self, executable, args: list) -> Any:
        if self._runtime is None:
            return executable(*args)
        args = [_globalize(a, lay) for a, lay in zip(args, executable.in_layouts)]
        return self._runtime.call(lambda: executable(*args), id(executable))

    def _across_workers(self, fn, key) -> Any:
        return fn() if self._runtime is None else self._runtime.call(fn, key)

    def __repr__(self) -> str:
        return (f"MultiWorkerMirroredStrategy(worker {self._worker_index} of {self._num_workers}, "
                f"{self.num_replicas_in_sync} replicas)")


def _globalize(x, layout) -> jax.Array:
    """A mirrored argument held by this process alone, as a global array over every worker."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return x
    host = np.asarray(x)
    return jax.make_array_from_callback(layout.global_shape, layout.sharding, lambda index: host[index])

"""`RayTrainClusterResolver`: the cluster of a Ray Train worker group (a `JaxTrainer`'s
`train_loop_per_worker`), so that `MultiWorkerMirroredStrategy` starts there with no TF_CONFIG.

Ray Train gives each worker its rank and the group's size; on CPU it leaves `jax.distributed`
to the workers (its JaxConfig starts it only for GPUs and TPUs). The workers agree on their
addresses here: each takes a free port on its Ray node's IP address, rank 0 names the group
(`ray.train.collective.broadcast_from_rank_zero`), and every worker publishes its address in
Ray's key-value store and reads the others'. From there the strategy joins as under TF_CONFIG
(`cluster.join`: the start-up handshake, JAX's coordination service on worker 0's address, the
liveness pings on the others'). Ray is imported only when a resolver is made."""
from __future__ import annotations

import os
import socket
import sys
import time
import uuid

from .base import ClusterResolver
from .cluster_spec import ClusterSpec
from .errors import ClusterStartError
from .ray import ray_module
from .startup import JOIN_TIMEOUT_S
from .tf_config import TFConfigClusterResolver

NAMESPACE = "strategax"  # the keys of Ray's key-value store this module writes
POLL_S = 0.05


def _train_context():
    """Ray Train's context of this worker, or None outside a Ray Train worker (never imports
    Ray: a process that has not imported Ray Train is not one of its workers)."""
    train = sys.modules.get("ray.train")
    if train is None:
        return None
    try:
        context = train.get_context()
        context.get_world_size()
    except Exception:  # noqa: BLE001 - outside a worker Ray Train raises RuntimeError (v1: other types)
        return None
    return context


def in_ray_train_worker() -> bool:
    """Whether this process runs a Ray Train worker's training function."""
    return _train_context() is not None


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def default_resolver(timeout: float = JOIN_TIMEOUT_S) -> ClusterResolver:
    """MultiWorkerMirroredStrategy's cluster when none is given: TF_CONFIG's when it is set, else
    Ray Train's inside a Ray Train worker, else TF_CONFIG's (empty: this machine alone)."""
    if not os.environ.get("TF_CONFIG", "").strip() and in_ray_train_worker():
        return RayTrainClusterResolver(timeout)
    return TFConfigClusterResolver()


class RayTrainClusterResolver(ClusterResolver):
    """This Ray Train worker's place in its group: task ("worker", world rank) of world size
    workers, at addresses agreed when the cluster spec is first asked for (every worker of the
    group must ask: `MultiWorkerMirroredStrategy()` does). `timeout` bounds that agreement."""

    task_type, rpc_layer, environment = "worker", None, "ray"

    def __init__(self, timeout: float = JOIN_TIMEOUT_S):
        context = _train_context()
        if context is None:
            raise ClusterStartError(
                "RayTrainClusterResolver is made inside a Ray Train worker, and this process is not one",
                "create the strategy inside the training function that a ray.train.v2.jax.JaxTrainer runs "
                "(train_loop_per_worker); elsewhere use TF_CONFIG or no cluster (one machine)")
        self.task_id: int = context.get_world_rank()
        self.num_workers: int = context.get_world_size()
        self.timeout = timeout
        self._spec: ClusterSpec | None = None

    def cluster_spec(self) -> ClusterSpec:
        if self._spec is None:
            self._spec = ClusterSpec({"worker": self._agree()}, source="Ray Train")
        return self._spec

    def _agree(self) -> list[str]:
        """Every worker's address, by rank, through Ray's key-value store."""
        ray = ray_module()
        from jax._src import distributed  # pyright: ignore[reportPrivateImportUsage]  - no public "is initialized"
        from ray.experimental import internal_kv
        from ray.train.collective import broadcast_from_rank_zero

        if distributed.global_state.client is not None:
            raise ClusterStartError(
                "jax.distributed is running already in this Ray Train worker (the JaxTrainer's JaxConfig starts it "
                "for use_gpu/use_tpu): strategax starts it itself, on the addresses it watches",
                "pass jax_config=ray.train.v2.jax.JaxConfig() (which starts nothing) to the JaxTrainer")
        group = broadcast_from_rank_zero(uuid.uuid4().hex if self.task_id == 0 else None)
        host = ray.util.get_node_ip_address()
        internal_kv._internal_kv_put(f"{group}/{self.task_id}", _address(host, _free_port(host)),
                                     namespace=NAMESPACE)
        addresses: list[str | None] = [None] * self.num_workers
        deadline = time.monotonic() + self.timeout
        while None in addresses:
            for rank, known in enumerate(addresses):
                if known is None:
                    value = internal_kv._internal_kv_get(f"{group}/{rank}", namespace=NAMESPACE)
                    addresses[rank] = value.decode() if value else None
            if None in addresses and time.monotonic() > deadline:
                missing = [r for r, a in enumerate(addresses) if a is None]
                raise ClusterStartError(
                    f"Ray Train worker {self.task_id} of {self.num_workers}: the workers of rank {missing} did "
                    f"not publish their addresses within {self.timeout:g} s",
                    "see those workers' logs (ray logs, or the driver's output) for why they did not start")
            if None in addresses:
                time.sleep(POLL_S)
        return [a for a in addresses if a is not None]

    def __repr__(self) -> str:
        return f"RayTrainClusterResolver(worker {self.task_id} of {self.num_workers})"

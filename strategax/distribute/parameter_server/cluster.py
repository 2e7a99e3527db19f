"""The actors of a parameter-server job: started where the resolver places them, a worker
started again in its place when it dies, all of them stopped with the strategy. Each worker
connects to every parameter server and the coordinator to each worker through a direct
channel (`cluster/channel.py`, authenticated with a key made here for this job)."""
from __future__ import annotations

import os

from ...cluster.errors import ClusterStartError
from ...cluster.ray import Placement, device_env, ray_module
from ...cluster import channel
from .errors import ParameterServerLostError
from .ps_actor import parameter_server_class
from .worker_actor import worker_class

STARTUP_TIMEOUT = 600.0  # seconds for an actor to come up (it imports JAX)
CALL_TIMEOUT = 120.0  # seconds a parameter server may take to answer before it counts as lost


class Cluster:
    """Worker and parameter-server actor handles, in task order."""

    def __init__(self, placement: Placement, timeout: float = CALL_TIMEOUT):
        self.placement, self.timeout = placement, timeout
        self.authkey = os.urandom(32)
        self.channels: list = []  # the coordinator's connection to each worker
        ps_class, self._worker_class = parameter_server_class(), worker_class()
        self.servers = [placement.start(ps_class, "ps", i, i, self.authkey) for i in range(placement.num_ps)]
        self.workers = [self._start_worker(i) for i in range(placement.num_workers)]  # all start at once
        servers = self._wait([s.ready.remote() for s in self.servers], "the parameter servers")
        self.server_pids = [pid for pid, _ in servers]
        self.server_addresses = [address for _, address in servers]
        ready = self._wait([w.ready.remote(self.server_addresses) for w in self.workers], "the workers")
        self.replicas_per_worker = ready[0][0]
        self.worker_pids = [pid for _, pid, _ in ready]
        try:
            self.channels = [channel.connect(address, self.authkey) for _, _, address in ready]
        except OSError as e:
            self.shutdown()
            raise ClusterStartError(f"could not connect to the workers of the parameter-server job: {e}",
                                    "check that the Ray nodes can reach each other on TCP ports") from e

    @property
    def num_workers(self) -> int:
        return len(self.workers)

    @property
    def num_ps(self) -> int:
        return len(self.servers)

    def _start_worker(self, index: int):
        devices = self.placement.devices_per_worker
        return self.placement.start(self._worker_class, "worker", index, device_env(devices), devices, index,
                                    self.placement.num_workers, self.placement.num_ps, self.authkey, self.timeout)

    def _wait(self, refs: list, what: str) -> list:
        ray = ray_module()
        try:
            return ray.get(refs, timeout=STARTUP_TIMEOUT)
        except (ray.exceptions.RayError, TimeoutError) as e:
            self.shutdown()
            raise ClusterStartError(f"{what} of the parameter-server job did not start: "
                                    f"{type(e).__name__}: {str(e).splitlines()[0][:300]}",
                                    "check that every Ray node can import strategax and JAX "
                                    "(`ray start` from the same environment)") from e

    def restart_worker(self, index: int):
        """A new worker for task `index` (whose worker died; the old actor is stopped, should
        only its channel have broken), once it is ready: (its handle, the coordinator's channel
        to it); the caller puts them in `workers[index]` and `channels[index]`."""
        ray = ray_module()
        channel.close(self.channels[index])
        try:
            ray.kill(self.workers[index])
        except Exception:  # noqa: BLE001 - already gone
            pass
        worker = self._start_worker(index)
        try:
            _, pid, address = ray.get(worker.ready.remote(self.server_addresses), timeout=STARTUP_TIMEOUT)
            conn = channel.connect(address, self.authkey)
        except BaseException:
            ray.kill(worker)  # not left running beside the next try
            raise
        self.worker_pids[index] = pid
        return worker, conn

    def call_ps(self, ps: int, method: str, *args):
        """Call a parameter server from the coordinator; a server that does not answer is lost."""
        ray = ray_module()
        try:
            return ray.get(getattr(self.servers[ps], method).remote(*args), timeout=self.timeout)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as e:
            raise ParameterServerLostError(
                f"parameter server {ps} is lost ({type(e).__name__}); its variables are gone",
                "restart training from the last checkpoint (sx.Checkpoint / sx.CheckpointManager)") from None

    def shutdown(self) -> None:
        """Stop every actor (the strategy is done)."""
        for conn in self.channels:
            channel.close(conn)
        ray = ray_module()
        if not ray.is_initialized():
            return
        for actor in list(getattr(self, "workers", [])) + list(getattr(self, "servers", [])):
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass

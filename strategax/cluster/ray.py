"""Parameter-server jobs on Ray: `RayClusterResolver`, connecting to (or starting) a Ray cluster,
and placing a job's tasks (worker and parameter-server actors) on its nodes; a
`TFConfigClusterResolver`'s `worker` and `ps` tasks go to the Ray nodes of their hosts.

Ray is imported here, lazily (importing strategax never imports it), and in the actors."""
from __future__ import annotations

import contextlib
import os
import re
import socket
from dataclasses import dataclass, field
from typing import Any, cast

from .base import ClusterResolver
from .cluster_spec import ClusterSpec
from .errors import ClusterConfigError, ClusterStartError

# a local cluster for development and tests: no dashboard, workers' output kept out of the driver's,
# no task events (the records behind `ray list tasks` and the dashboard's timeline: they cost about a
# fifth of the CPU time of each actor call, and a parameter-server step makes three)
LOCAL = {"include_dashboard": False, "log_to_driver": False,
         "_system_config": {"task_events_report_interval_ms": 0}}
DEVICE_FLAG = "--xla_force_host_platform_device_count"


def ray_module():
    """`ray`, or an error that says how to install it."""
    try:
        import ray
        import ray.exceptions  # imported by ray itself; named here so that type checkers know it
    except ImportError:
        raise ClusterStartError("Ray is not installed (parameter-server jobs and Ray Train jobs run on it)",
                                'pip install "strategax[ray]"') from None
    return ray


def cloudpickle():
    """Ray's cloudpickle: how functions, their closures and their arguments travel to the actors."""
    ray_module()
    import ray.cloudpickle

    return ray.cloudpickle


def dumps(obj: Any) -> bytes:
    """`obj` (a function with its closure, arguments, an error) as it travels to and from the actors."""
    return cloudpickle().dumps(obj)  # pyright: ignore[reportPrivateImportUsage]  - ray re-exports it without __all__


def connect(address: str | None, init_kwargs: dict | None = None) -> None:
    """Join the Ray cluster at `address` ("auto", "host:port"), or start a local one (`None`),
    unless this process is connected already."""
    ray = ray_module()
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = dict(LOCAL if address is None else {}, **(init_kwargs or {}))
    try:
        with _lean_local_node(address is None and not kwargs.get("include_dashboard")
                              and not kwargs.get("log_to_driver", True)):
            ray.init(address="local" if address is None else address, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = "a local Ray cluster" if address is None else f"the Ray cluster at {address!r}"
        raise ClusterStartError(f"could not start or join {where}: {str(e).splitlines()[0][:300]}",
                                "start Ray on every machine first (`ray start --head` on one, "
                                "`ray start --address=HEAD:6379` on the others), or pass address=None") from e


@contextlib.contextmanager
def _lean_local_node(lean: bool):
    """While a local cluster without dashboard and without workers' output in the driver's
    starts: skip the three head processes that then serve nothing (the dashboard's API server,
    which `include_dashboard=False` still starts for usage statistics and which `ray.init` waits
    about a second for; the autoscaler's monitor, with nothing to scale on one machine; the log
    monitor, which only forwards workers' output to drivers). Each costs a Python process start
    (about 0.5 s of CPU) while the cluster comes up. Ray has no public option for them, so this
    sets its private ones for the duration of `ray.init`, and does nothing where they changed."""
    try:
        from ray._private.node import Node
        from ray._private.parameter import RayParams
    except ImportError:
        lean = False
    if not lean or not all(hasattr(c, m) for c, m in ((Node, "start_api_server"), (RayParams, "__init__"))):
        yield
        return
    params_init, start_api_server = RayParams.__init__, Node.start_api_server

    def lean_params(self, *args, **kwargs):
        params_init(self, *args, **kwargs)
        self.no_monitor, self.include_log_monitor = True, False

    RayParams.__init__ = lean_params
    Node.start_api_server = lambda self, **kwargs: None
    try:
        yield
    finally:
        RayParams.__init__ = params_init
        Node.start_api_server = start_api_server


def device_env(devices_per_worker: int | None) -> dict[str, str]:
    """The environment of a worker actor: `devices_per_worker` simulated CPU devices (set before
    JAX is imported in the actor), the driver's other XLA flags kept."""
    if devices_per_worker is None:
        return {}
    flags = re.sub(rf"{DEVICE_FLAG}=\S+", "", os.environ.get("XLA_FLAGS", "")).split()
    return {"XLA_FLAGS": " ".join(flags + [f"{DEVICE_FLAG}={devices_per_worker}"])}


@dataclass
class Placement:
    """Where each task of a parameter-server job runs: Ray actor options per task."""
    num_workers: int
    num_ps: int
    devices_per_worker: int | None = 1
    worker_options: list[dict] = field(default_factory=list)
    ps_options: list[dict] = field(default_factory=list)

    def start(self, actor_class, task_type: str, index: int, *args, env: dict | None = None):
        """Start the actor of task (`task_type`, `index`) with `args`; returns its handle."""
        ray = ray_module()
        options = (self.worker_options if task_type == "worker" else self.ps_options)[index]
        runtime_env = {"env_vars": dict(env)} if env else None
        remote = ray.remote(actor_class).options(num_cpus=0, max_restarts=0, max_task_retries=0,
                                                 runtime_env=runtime_env, **options)
        return remote.remote(*args)


class RayClusterResolver(ClusterResolver):
    """`num_workers` worker and `num_ps` parameter-server actors on a Ray cluster: `address=None`
    starts a local cluster on this machine (unless this process is connected to one already),
    `"auto"` or `"host:port"` joins a running one. This process is the chief (the coordinator).
    `devices_per_worker` simulated CPU devices per worker (`None`: the devices it has, e.g. GPUs
    given through `worker_options={"num_gpus": 1}`); `ray_init` is passed to `ray.init`."""

    task_type, task_id, rpc_layer = "chief", 0, "ray"

    def __init__(self, num_workers: int, num_ps: int, address: str | None = None, *,
                 devices_per_worker: int | None = 1, worker_options: dict | None = None,
                 ps_options: dict | None = None, ray_init: dict | None = None):
        for value, what in ((num_workers, "num_workers"), (num_ps, "num_ps")):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ClusterConfigError(f"RayClusterResolver's {what} must be an int >= 1, not {value!r}",
                                         f"pass {what}=1 or more")
        if devices_per_worker is not None and (isinstance(devices_per_worker, bool)
                                               or not isinstance(devices_per_worker, int) or devices_per_worker < 1):
            raise ClusterConfigError(f"devices_per_worker must be an int >= 1 or None, not {devices_per_worker!r}",
                                     "pass devices_per_worker=1 (or more simulated CPU devices), or None")
        self.num_workers, self.num_ps, self.address = num_workers, num_ps, address
        self.devices_per_worker = devices_per_worker
        self._worker_options, self._ps_options = dict(worker_options or {}), dict(ps_options or {})
        self._ray_init = ray_init

    def cluster_spec(self) -> ClusterSpec:
        """Ray places the tasks: they have no host:port of their own."""
        return ClusterSpec({})

    def placement(self) -> Placement:
        connect(self.address, self._ray_init)
        spread = {"scheduling_strategy": "SPREAD"}
        return Placement(self.num_workers, self.num_ps, self.devices_per_worker,
                         [dict(spread, **self._worker_options) for _ in range(self.num_workers)],
                         [dict(spread, **self._ps_options) for _ in range(self.num_ps)])

    def __repr__(self) -> str:
        return (f"RayClusterResolver(num_workers={self.num_workers}, num_ps={self.num_ps}, "
                f"address={self.address!r})")


def placement_of(resolver: Any) -> Placement:
    """The placement of a RayClusterResolver, or of a TensorFlow cluster description (its
    `worker` and `ps` tasks on the Ray nodes of their hosts; this process is the chief)."""
    if isinstance(resolver, RayClusterResolver):
        return resolver.placement()
    if not isinstance(resolver, ClusterResolver):
        raise ClusterConfigError(
            f"ParameterServerStrategy takes a cluster resolver, not {type(resolver).__name__} {resolver!r:.60}",
            "pass sx.cluster_resolver.RayClusterResolver(num_workers=2, num_ps=1), or a TFConfigClusterResolver")
    spec = resolver.cluster_spec()
    workers, servers = spec.job_tasks("worker"), spec.job_tasks("ps")
    if not workers or not servers:
        raise ClusterConfigError(
            f"a parameter-server job needs \"worker\" and \"ps\" tasks; the cluster has {spec.jobs or 'none'}",
            'describe them in TF_CONFIG: {"cluster": {"chief": [...], "worker": [...], "ps": [...]}, '
            '"task": {"type": "chief", "index": 0}}')
    if None in workers or None in servers:
        raise ClusterConfigError(f"the worker and ps tasks must be numbered 0, 1, ... without gaps: {spec.as_dict()}",
                                 "list the tasks of each job in order")
    workers, servers = cast(list[str], workers), cast(list[str], servers)  # without gaps (None): checked above
    if resolver.task_type not in (None, "chief"):
        raise ClusterConfigError(
            f"this process is task {resolver.task_type!r} {resolver.task_id}; on Ray only the chief runs the "
            "program (workers and parameter servers are Ray actors it starts)",
            "run the program on the chief only; on the other machines run `ray start --address=HEAD:6379`")
    _join_for(workers + servers)
    nodes = _nodes_by_address()
    return Placement(len(workers), len(servers), 1,
                     [_on_node(nodes, a, f"worker {i}") for i, a in enumerate(workers)],
                     [_on_node(nodes, a, f"ps {i}") for i, a in enumerate(servers)])


def _join_for(addresses: list[str]) -> None:
    """Join the running Ray cluster (RAY_ADDRESS, else the one `ray start` made on this machine);
    with none, start a local one if every task is on this machine."""
    if ray_module().is_initialized():
        return
    try:
        connect(os.environ.get("RAY_ADDRESS", "auto"))
    except ClusterStartError:
        if not all(_is_local(a.rsplit(":", 1)[0].strip("[]")) for a in addresses):
            raise
        connect(None)


def _is_local(host: str) -> bool:
    try:
        return socket.gethostbyname(host).startswith("127.") or host in ("localhost", socket.gethostname())
    except OSError:
        return False


def _nodes_by_address() -> dict[str, str]:
    """IP address (and "local" for this machine) -> Ray node id, for the alive nodes."""
    ray = ray_module()
    out = {}
    for node in ray.nodes():
        if node.get("Alive"):
            out[node["NodeManagerAddress"]] = node["NodeID"]
    out["local"] = ray.get_runtime_context().get_node_id()
    return out


def _on_node(nodes: dict[str, str], address: str, task: str) -> dict:
    """Actor options pinning `task` (at "host:port") to the Ray node of its host."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    host = address.rsplit(":", 1)[0].strip("[]")
    try:
        ip = socket.gethostbyname(host)
    except OSError:
        raise ClusterConfigError(f"the host of {task} ({host!r}) does not resolve", "use a host name or IP "
                                 "address of a machine in the Ray cluster") from None
    node = nodes["local"] if _is_local(host) else nodes.get(ip)
    if node is None:
        known = sorted(k for k in nodes if k != "local")
        raise ClusterConfigError(f"{task}'s host {host} ({ip}) is not a node of the Ray cluster (nodes: {known})",
                                 f"run `ray start --address=HEAD:6379` on {host} first")
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node, soft=False)}

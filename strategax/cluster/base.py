"""`ClusterResolver` (what a multi-worker strategy asks) and `SimpleClusterResolver`."""
from __future__ import annotations

from .cluster_spec import ClusterSpec
from .errors import ClusterConfigError

# Jobs whose tasks take part in the collective, in worker order (TensorFlow puts the chief first).
WORKER_JOBS = ("chief", "worker")


class ClusterResolver:
    """Base class: a cluster spec plus this process's task type and index."""

    task_type: str | None = None
    task_id: int | None = None
    rpc_layer: str | None = None
    environment: str = ""

    def cluster_spec(self) -> ClusterSpec:
        raise NotImplementedError

    def master(self, task_type: str | None = None, task_id: int | None = None, rpc_layer: str | None = None) -> str:
        """The address of a task (this one by default), with the rpc layer prefix if any."""
        task_type = self.task_type if task_type is None else task_type
        task_id = self.task_id if task_id is None else task_id
        if task_type is None or task_id is None:
            return ""
        address = self.cluster_spec().task_address(task_type, task_id)
        layer = rpc_layer or self.rpc_layer
        return f"{layer}://{address}" if layer else address

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None) -> dict[str, int]:
        import jax

        devices = jax.local_devices()
        return {} if devices[0].platform == "cpu" else {devices[0].platform.upper(): len(devices)}

    # --- what MultiWorkerMirroredStrategy needs -------------------------------------------
    def worker_addresses(self) -> list[str]:
        """The addresses of the tasks that take part, chief first, then the workers (TensorFlow's
        rules: at most one chief; the jobs' task indices run 0..n-1 without gaps)."""
        spec = self.cluster_spec()
        if spec.num_tasks("chief") > 1:
            raise ClusterConfigError(f"the cluster has {spec.num_tasks('chief')} \"chief\" tasks; "
                                     "there must be at most one",
                                     'list one chief, and the other tasks under "worker"')
        for job in WORKER_JOBS:
            indices = spec.task_indices(job)
            if indices != list(range(len(indices))):
                raise ClusterConfigError(
                    f"job {job!r} has the task indices {indices}; MultiWorkerMirroredStrategy needs "
                    f"0 to {len(indices) - 1} without gaps", f"number the {job} tasks 0, 1, 2, ...")
        return [spec.task_address(job, i) for job in WORKER_JOBS for i in spec.task_indices(job)]

    def worker_tasks(self) -> list[tuple[str, int]]:
        """(task type, task index) of each of `worker_addresses()`."""
        spec = self.cluster_spec()
        return [(job, i) for job in WORKER_JOBS for i in spec.task_indices(job)]

    def worker_index(self) -> int:
        """This task's place among `worker_addresses()` (0 is the coordinator)."""
        if not self.cluster_spec():
            return 0
        if self.task_type not in WORKER_JOBS:
            raise ClusterConfigError(
                f"task type {self.task_type!r} does not take part in MultiWorkerMirroredStrategy",
                'run it as a "worker" (or "chief") task; other task types run no replicas')
        if self.task_id is None:
            raise ClusterConfigError(f"this {self.task_type!r} task has no index (the resolver's task_id is None)",
                                     "set task_id to this process's index in its job")
        offset = sum(self.cluster_spec().num_tasks(j) for j in WORKER_JOBS[:WORKER_JOBS.index(self.task_type)])
        return offset + self.task_id


def check_task(spec: ClusterSpec, task_type, task_id, source: str) -> tuple[str | None, int | None]:
    """Validate (task_type, task_id) against `spec`; errors name `source` (e.g. "TF_CONFIG")."""
    if not spec:
        return task_type, task_id
    if task_type is None or task_id is None:
        raise ClusterConfigError(
            f"{source} describes a cluster of {spec.jobs} but no task for this process",
            'add "task": {"type": "worker", "index": I} naming this process')
    if not isinstance(task_type, str) or task_type not in spec.jobs:
        raise ClusterConfigError(f"{source} task.type is {task_type!r}, which is not a job of the cluster {spec.jobs}",
                                 f"use one of {spec.jobs}")
    if isinstance(task_id, bool) or not isinstance(task_id, int):
        raise ClusterConfigError(f"{source} task.index is {task_id!r}, which is not an integer",
                                 'write "index": 0 (a number)')
    indices = spec.task_indices(task_type)
    if task_id not in indices:
        raise ClusterConfigError(
            f"{source} task.index is {task_id}, which is out of range for job {task_type!r}, whose tasks "
            f"are {indices}", f"use one of {indices}")
    return task_type, task_id


class SimpleClusterResolver(ClusterResolver):
    """A resolver from values given directly (TensorFlow's SimpleClusterResolver)."""

    def __init__(self, cluster_spec, master: str = "", task_type: str | None = None, task_id: int | None = None,
                 environment: str = "", num_accelerators=None, rpc_layer: str | None = None):
        self._spec = ClusterSpec(cluster_spec, source="SimpleClusterResolver")
        self.task_type, self.task_id = check_task(self._spec, task_type, task_id, "SimpleClusterResolver")
        self._master, self.environment, self.rpc_layer = master, environment, rpc_layer
        self._num_accelerators = num_accelerators

    def cluster_spec(self) -> ClusterSpec:
        return self._spec

    def master(self, task_type=None, task_id=None, rpc_layer=None) -> str:
        if self._master and task_type is None and task_id is None:
            return self._master
        return super().master(task_type, task_id, rpc_layer)

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None) -> dict[str, int]:
        if self._num_accelerators is not None:
            return dict(self._num_accelerators)
        return super().num_accelerators(task_type, task_id, config_proto)

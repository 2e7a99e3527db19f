"""`ClusterSpec`: job name -> task addresses by task index, as in TensorFlow, checked as it is
built: integer task keys, "host:port" addresses with ports in range, no address twice."""
from __future__ import annotations

from typing import Mapping, Sequence

from .address import parse_address
from .errors import ClusterConfigError


_LOOPBACK = {"localhost", "127.0.0.1", "::1"}  # one machine's own names: "localhost:1" is "127.0.0.1:1"


def _host_key(host: str) -> str:
    """What two task addresses must differ in (case aside, and the loopback's names as one)."""
    host = host.lower()
    return "localhost" if host in _LOOPBACK else host


def _task_index(key, field: str) -> int:
    """A sparse job's task key: an int, or (JSON has only string keys) a string of digits."""
    if isinstance(key, int) and not isinstance(key, bool) and key >= 0:
        return key
    if isinstance(key, str) and key.isascii() and key.isdigit():
        return int(key)
    raise ClusterConfigError(f"{field} has the task key {key!r}, which is not a task index (0, 1, ...)",
                             'key a job\'s tasks by their index: {"0": "host:port", "1": "host:port"}, '
                             'or list them: ["host:port", ...]')


class ClusterSpec:  # noqa: PLW1641  compared by value, hence unhashable, like tf.train.ClusterSpec
    """The tasks of a cluster by job name (`{"worker": ["host:port", ...], "chief": [...]}`, or
    TensorFlow's sparse form `{"worker": {0: "host:port", 3: "host:port"}}`)."""

    def __init__(self, cluster: "Mapping[str, Sequence[str] | Mapping[int, str]] | ClusterSpec", *,
                 source: str = "the cluster spec"):
        if isinstance(cluster, ClusterSpec):
            self._jobs = {job: dict(tasks) for job, tasks in cluster._jobs.items()}
            return
        if not isinstance(cluster, Mapping):
            raise ClusterConfigError(f"{source} must map job names to address lists, not {cluster!r}",
                                     'write it as {"worker": ["host:port", ...]}')
        self._jobs: dict[str, dict[int, str]] = {}
        seen: dict[tuple[str, int], str] = {}
        for job, tasks in cluster.items():
            field = f"{source} cluster.{job}"
            if not isinstance(job, str) or not job:
                raise ClusterConfigError(f"{source} has the job name {job!r}; job names are non-empty strings",
                                         'name jobs "chief", "worker", "ps" or "evaluator"')
            if isinstance(tasks, Mapping):
                indexed: dict[int, str] = {}
                for key, address in tasks.items():
                    index = _task_index(key, field)
                    if index in indexed:
                        raise ClusterConfigError(f"{field} names task {index} twice (key {key!r})",
                                                 "give each task one key")
                    indexed[index] = address
                items = sorted(indexed.items())
            elif isinstance(tasks, Sequence) and not isinstance(tasks, (str, bytes)):
                items = list(enumerate(tasks))
            else:
                raise ClusterConfigError(f"{field} must list its task addresses, not {tasks!r}",
                                         f'write it as "{job}": ["host:port", ...]')
            for index, address in items:
                where = f"{field}[{index}]"
                host, port = parse_address(address, where)
                other = seen.setdefault((_host_key(host), port), where)
                if other != where:
                    raise ClusterConfigError(f"{where} and {other} have the same address {address!r}",
                                             "give every task its own host:port")
            self._jobs[job] = dict(items)

    @property
    def jobs(self) -> list[str]:
        return list(self._jobs)

    def as_dict(self) -> dict:
        """job -> list of addresses, or {index: address} for a job with gaps (as TensorFlow)."""
        return {job: list(tasks.values()) if self._dense(job) else dict(tasks)
                for job, tasks in self._jobs.items()}

    def _dense(self, job_name: str) -> bool:
        return list(self._jobs.get(job_name, {})) == list(range(len(self._jobs.get(job_name, {}))))

    def num_tasks(self, job_name: str) -> int:
        return len(self._jobs.get(job_name, ()))

    def task_indices(self, job_name: str) -> list[int]:
        return list(self._jobs.get(job_name, ()))

    def job_tasks(self, job_name: str) -> list[str | None]:
        """The job's addresses by index (None where a sparse job has no task), as TensorFlow."""
        tasks = self._jobs.get(job_name, {})
        return [tasks.get(i) for i in range(max(tasks, default=-1) + 1)]

    def task_address(self, job_name: str, task_index: int) -> str:
        try:
            return self._jobs[job_name][task_index]
        except KeyError:
            raise ClusterConfigError(f"no task with index {task_index} in job {job_name!r}",
                                     f"use one of {self.task_indices(job_name)}") from None

    def __bool__(self) -> bool:
        return any(self._jobs.values())

    def __eq__(self, other) -> bool:
        return isinstance(other, ClusterSpec) and self._jobs == other._jobs

    def __repr__(self) -> str:
        return f"ClusterSpec({self.as_dict()!r})"

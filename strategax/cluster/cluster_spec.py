"""`ClusterSpec`: job name -> list of "host:port" task addresses, as in TensorFlow."""
from __future__ import annotations

from typing import Mapping, Sequence

from .errors import ClusterConfigError


class ClusterSpec:
    """The tasks of a cluster by job name (`{"worker": ["host:port", ...], "chief": [...]}`)."""

    def __init__(self, cluster: "Mapping[str, Sequence[str] | Mapping[int, str]] | ClusterSpec"):
        if isinstance(cluster, ClusterSpec):
            cluster = cluster.as_dict()
        if not isinstance(cluster, Mapping):
            raise ClusterConfigError(f"a cluster spec must map job names to address lists, not {cluster!r}",
                                     'write it as {"worker": ["host:port", ...]}')
        self._jobs: dict[str, list[str]] = {}
        for job, tasks in cluster.items():
            if isinstance(tasks, Mapping):  # TensorFlow's sparse form {index: address}
                tasks = [tasks[i] for i in sorted(tasks)]
            if isinstance(tasks, str) or not isinstance(tasks, Sequence):
                raise ClusterConfigError(f"job {job!r} must list its task addresses, not {tasks!r}",
                                         f'write it as "{job}": ["host:port", ...]')
            for address in tasks:
                if not isinstance(address, str) or ":" not in address:
                    raise ClusterConfigError(f"task address {address!r} of job {job!r} is not \"host:port\"",
                                             'give every task an address such as "localhost:12345"')
            self._jobs[str(job)] = list(tasks)

    @property
    def jobs(self) -> list[str]:
        return list(self._jobs)

    def as_dict(self) -> dict[str, list[str]]:
        return {job: list(tasks) for job, tasks in self._jobs.items()}

    def num_tasks(self, job_name: str) -> int:
        return len(self._jobs.get(job_name, ()))

    def job_tasks(self, job_name: str) -> list[str]:
        return list(self._jobs.get(job_name, ()))

    def task_address(self, job_name: str, task_index: int) -> str:
        return self._jobs[job_name][task_index]

    def __bool__(self) -> bool:
        return any(self._jobs.values())

    def __eq__(self, other) -> bool:
        return isinstance(other, ClusterSpec) and self.as_dict() == other.as_dict()

    def __repr__(self) -> str:
        return f"ClusterSpec({self.as_dict()!r})"

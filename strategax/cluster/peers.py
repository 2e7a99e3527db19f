"""The workers of a job as this process sees them: addresses, this worker's place, how each
one is named in messages, and the liveness check that tells a lost worker from a live one."""
from __future__ import annotations

import time
from dataclasses import dataclass

from .liveness import probe

RESTART = "The job cannot continue: restart it (from the last checkpoint)."


@dataclass(frozen=True)
class Peers:
    """Worker i has `addresses[i]` and is task `tasks[i]` = (type, index); worker 0 coordinates."""
    addresses: tuple[str, ...]
    index: int
    tasks: tuple[tuple[str, int], ...]

    @classmethod
    def of(cls, addresses, index: int, tasks=None) -> "Peers":
        tasks = tuple(tasks) if tasks is not None else tuple(("worker", i) for i in range(len(addresses)))
        return cls(tuple(addresses), index, tasks)

    @property
    def others(self) -> list[int]:
        return [i for i in range(len(self.addresses)) if i != self.index]

    def describe(self, i: int) -> str:
        task_type, task_index = self.tasks[i]
        role = "chief/coordinator" if i == 0 else task_type  # worker 0 acts as TensorFlow's chief
        return f"worker {i} ({role}, task index {task_index}, {self.addresses[i]})"

    def me(self) -> str:
        return f"strategax: worker {self.index} of {len(self.addresses)}"

    def probe_all(self) -> dict[int, str]:
        """"alive" / "dead" / "unresponsive" per peer (the coordinator by connection only:
        its port is JAX's coordination service)."""
        return {i: probe(self.addresses[i], ping=i > 0) for i in self.others}

    def find_lost(self, attempts: int = 8, pause: float = 0.25) -> tuple[list[int], list[int]]:
        """(dead, unresponsive) peers; retried briefly while a dying peer's sockets close."""
        dead, slow = [], []
        for _ in range(attempts):
            states = self.probe_all()
            dead = [i for i, s in states.items() if s == "dead"]
            slow = [i for i, s in states.items() if s == "unresponsive"]
            if dead or slow:
                break
            time.sleep(pause)
        return dead, slow

    def lost_message(self, what: str, dead, slow=(), absent=()) -> str:
        parts = [f"{self.describe(i)} was lost (its process is gone)" for i in dead]
        parts += [f"{self.describe(i)} does not answer" for i in slow]
        parts += [f"{self.describe(i)} did not arrive (it is alive, elsewhere in the program: every "
                  "worker must make the same saves and steps, in the same order)" for i in absent]
        who = "; ".join(parts) or "no peer was found dead; a peer may be hanging"
        return f"{self.me()}: {what}: {who}. {RESTART}"

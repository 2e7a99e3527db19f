"""Start the worker processes of a loopback multi-worker job, and always reap them."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().parent / "workers" / "mlp_worker.py"


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Job:
    """`num_workers` processes of `script` with `devices` simulated CPU devices each, on loopback
    (`host`: any 127.x.y.z address; `addresses` to choose the ports), run in `cwd`."""

    def __init__(self, tmp: Path, num_workers: int, devices: int, args: list[str], script: Path = WORKER,
                 host: str = "127.0.0.1", addresses: list[str] | None = None, cwd: Path = ROOT):
        addresses = addresses or [f"{host}:{p}" for p in free_ports(num_workers, host)]
        self.addresses = addresses
        tmp.mkdir(parents=True, exist_ok=True)
        self.procs, self.outs, self.errs = [], [], []
        for i in range(num_workers):
            env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "TF_CONFIG")}
            env.update(XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", JAX_PLATFORMS="cpu",
                       PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
                       TF_CONFIG=json.dumps({"cluster": {"worker": addresses},
                                             "task": {"type": "worker", "index": i}}))
            out, err = tmp / f"worker{i}.out", tmp / f"worker{i}.err"
            self.outs.append(out)
            self.errs.append(err)
            with open(out, "w") as o, open(err, "w") as e:
                self.procs.append(subprocess.Popen([sys.executable, str(script), *args], env=env,
                                                   stdout=o, stderr=e, cwd=str(cwd)))
        self.t0 = time.monotonic()

    def wait(self, timeout: float) -> list[int]:
        """Exit codes; kills everything and fails if the job outlives `timeout`."""
        deadline = time.monotonic() + timeout
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"the job did not finish within {timeout} s:\n{self.logs()}") from None
        return codes

    def exit_times(self, timeout: float) -> list[tuple[int | None, float]]:
        """(exit code, seconds from the start) per worker; None for one still running after
        `timeout` seconds (then killed)."""
        out: list = [None] * len(self.procs)
        deadline = self.t0 + timeout
        while any(o is None for o in out) and time.monotonic() < deadline:
            for i, p in enumerate(self.procs):
                if out[i] is None and p.poll() is not None:
                    out[i] = (p.returncode, time.monotonic() - self.t0)
            time.sleep(0.05)
        self.kill()
        return [o or (None, timeout) for o in out]

    def wait_for_line(self, worker: int, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.outs[worker].read_text().splitlines():
                return
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.05)
        self.kill()
        raise AssertionError(f"worker {worker} never printed {text!r}:\n{self.logs()}")

    def result(self, worker: int) -> dict:
        return json.loads(self.outs[worker].read_text().splitlines()[-1])

    def stderr(self, worker: int) -> str:
        return self.errs[worker].read_text()

    def logs(self) -> str:
        return "\n".join(f"--- worker {i} stderr ---\n{e.read_text()[-3000:]}" for i, e in enumerate(self.errs))

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait()

    def __enter__(self) -> "Job":
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

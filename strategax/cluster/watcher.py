"""A tiny child process per worker that names the lost worker after JAX's runtime aborts this
one. JAX's coordination client terminates the process (SIGABRT) when the service reports a
dead peer or the coordinator goes away; that cannot be intercepted from Python in jaxlib
0.10.2 (its error callback takes no Python function). The child holds a pipe from the worker:
when the worker dies without its atexit goodbye, the child probes the peers and writes to the
worker's stderr which of them are gone."""
from __future__ import annotations

import atexit
import json
import subprocess
import sys

from .address import split_address
from .liveness import MAGIC
from .peers import RESTART, Peers

_goodbye = None  # one watcher per process, however many strategies share the job: its goodbye

_WATCH = r"""
import json, socket, sys, time
spec = json.loads(sys.argv[1])
if sys.stdin.buffer.read() == b"bye":
    raise SystemExit

def gone(i):
    host, port = spec["addresses"][i]
    try:
        with socket.create_connection((host, port), timeout=2) as s:
            if i > 0:  # the others answer pings on their own port
                s.sendall(spec["magic"].encode() + b" ping\n")
                s.recv(64)
        return False
    except socket.timeout:
        return False
    except OSError:
        return True

for attempt in range(3):  # at once: a peer that dies later did not cause this worker's end
    dead = [i for i in range(len(spec["addresses"])) if i != spec["index"] and gone(i)]
    if dead:
        who = "; ".join(spec["names"][i] + " was lost (its process is gone)" for i in dead)
        sys.stderr.write(f"{spec['me']}: JAX's distributed runtime stopped this worker: {who}. {spec['restart']}\n")
        break
    time.sleep(0.15)
"""


def start_watcher(peers: Peers) -> None:
    """Start the child (once per process); the worker's normal exit tells it to stop quietly."""
    global _goodbye
    if _goodbye is not None:
        return
    spec = {"addresses": [split_address(a) for a in peers.addresses], "index": peers.index,
            "names": [peers.describe(i) for i in range(len(peers.addresses))], "me": peers.me(),
            "restart": RESTART, "magic": MAGIC}
    child = subprocess.Popen([sys.executable, "-c", _WATCH, json.dumps(spec)], stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL)
    stdin = child.stdin
    assert stdin is not None  # stdin=PIPE

    def goodbye() -> None:
        try:
            stdin.write(b"bye")
            stdin.close()
        except (OSError, ValueError):
            pass

    _goodbye = goodbye
    atexit.register(goodbye)


def stand_down() -> None:
    """This worker names the fault itself and exits now: the watcher stays quiet."""
    if _goodbye is not None:
        _goodbye()

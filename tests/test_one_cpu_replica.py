"""A MirroredStrategy that finds one CPU device says so once, naming the XLA flag (JAX shows a
CPU as one device unless told otherwise; a new user otherwise trains on one replica unawares)."""
import os
import subprocess
import sys

SCRIPT = """
import strategax as sx
a = sx.MirroredStrategy()
b = sx.MirroredStrategy()
print("replicas", a.num_replicas_in_sync, b.num_replicas_in_sync)
"""


def test_one_cpu_device_is_logged_once_with_the_flag():
    # Intent: in a fresh process with JAX's default single CPU device, two strategies give one
    # replica each and the log names --xla_force_host_platform_device_count exactly once.
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "replicas 1 1" in out.stdout
    assert out.stderr.count("--xla_force_host_platform_device_count=N") == 1, out.stderr


def test_several_devices_are_not_logged():
    # Intent: with 8 simulated devices (the flag set) nothing is said.
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "replicas 8 8" in out.stdout and "xla_force_host_platform_device_count" not in out.stderr

"""Where a benchmark runs: `--device cpu` (8 simulated CPU devices; `--cpu-devices N` for
another count), `--device gpu` (every GPU, one replica each) or `--device auto` (the default:
the GPUs when JAX finds any, else the CPU).
Import this module before JAX: it sets the flags JAX reads when it starts (the simulated CPU
device count touches only the CPU platform, so it is set for every choice).
"""
import os
import sys

CHOICES = ("auto", "cpu", "gpu")


def _option(name: str, default: str) -> str:
    """An option's value read before argparse runs (JAX's flags are set at import)."""
    for i, arg in enumerate(sys.argv):
        if arg == name and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return default


REQUESTED = _option("--device", "auto")
CPU_DEVICES = int(_option("--cpu-devices", "8"))
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
if REQUESTED == "cpu":
    os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402


def add_argument(parser) -> None:
    parser.add_argument("--device", choices=CHOICES, default="auto",
                        help="cpu: 8 simulated CPU devices; gpu: every GPU, one replica each; auto: GPUs if any")
    parser.add_argument("--cpu-devices", type=int, default=8, help="with the CPU: how many of its devices")


def platform() -> str:
    """"gpu" or "cpu": what this run uses."""
    if REQUESTED == "gpu" or (REQUESTED == "auto" and jax.default_backend() == "gpu"):
        return "gpu"
    return "cpu"


def devices(cpu_count: int | None = None) -> list:
    """The devices of the run, one replica each: every GPU, or `cpu_count` CPU devices
    (--cpu-devices, 8 unless told)."""
    cpu_count = CPU_DEVICES if cpu_count is None else cpu_count
    if platform() == "gpu":
        return jax.devices("gpu")
    found = jax.devices("cpu")
    if len(found) < cpu_count:
        sys.exit(f"this benchmark needs {cpu_count} CPU devices and JAX shows {len(found)}: "
                 f"set XLA_FLAGS=--xla_force_host_platform_device_count={cpu_count}")
    return found[:cpu_count]


def describe(devs: list) -> str:
    """One line naming the devices and JAX, printed before the figures."""
    kind = devs[0].device_kind if devs[0].platform != "cpu" else "simulated CPU device"
    return f"devices    {len(devs)} x {kind} ({devs[0].platform}), JAX {jax.__version__}"


def not_run(name: str, why: str) -> None:
    """Say in one line why this benchmark does not run here, and stop (a clean exit)."""
    print(f"{name}: not run on {platform()}: {why}")
    sys.exit(0)

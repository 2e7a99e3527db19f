"""Device specs: `jax.Device` objects or TensorFlow-style strings such as "/device:GPU:1"."""
from __future__ import annotations

import re
from typing import Any, Sequence

import jax

from ..errors import DistributionTypeError, DistributionValueError

_DEVICE = re.compile(r"^(?:/job:[^/]+)?(?:/replica:\d+)?(?:/task:\d+)?/?(?:device:)?"
                     r"(?P<kind>[A-Za-z_]+):(?P<index>\d+)$", re.IGNORECASE)


def resolve_device(spec: Any) -> jax.Device:  # pyright: ignore[reportInvalidTypeForm]  jaxlib ships no stub for Device
    """One device from a jax.Device or a string like "CPU:0", "gpu:1",
    "/job:localhost/replica:0/task:0/device:CPU:3"."""
    if isinstance(spec, jax.Device):
        return spec
    if not isinstance(spec, str):
        raise DistributionValueError(f"not a device: {spec!r}",
                                     'pass a jax.Device or a string such as "CPU:0" or "/device:GPU:1"')
    m = _DEVICE.match(spec.strip())
    if m is None:
        raise DistributionValueError(f"cannot read device string {spec!r}",
                                     'write it as "CPU:0", "GPU:1" or "/job:localhost/replica:0/task:0/device:CPU:3"')
    kind, index = m.group("kind").lower(), int(m.group("index"))
    try:
        devices = jax.devices(kind)
    except RuntimeError:
        devices = []
    if index >= len(devices):
        have = ", ".join(f"{d.platform.upper()}:{d.id}" for d in jax.devices()) or "none"
        raise DistributionValueError(
            f"device {spec!r} does not exist (this process has {len(devices)} {kind.upper()} "
            f"device(s); all devices: {have})",
            "pick an existing device, or set XLA_FLAGS=--xla_force_host_platform_device_count=N "
            "before importing JAX to simulate N CPU devices")
    return devices[index]


def resolve_devices(specs: Sequence[Any] | None) -> list[jax.Device]:  # pyright: ignore[reportInvalidTypeForm]  jaxlib ships no stub for Device
    """A list of distinct devices; None means all local devices."""
    if specs is None:
        return list(jax.local_devices())
    if isinstance(specs, (str, jax.Device)):
        specs = [specs]
    if not isinstance(specs, (list, tuple)) and not hasattr(specs, "__iter__"):
        raise DistributionTypeError(
            f"devices must be a list of devices, not {type(specs).__name__} {specs!r:.60}",
            'pass a list such as ["CPU:0", "CPU:1"], jax.devices(), or None for all local devices')
    devices = [resolve_device(s) for s in specs]
    if not devices:
        raise DistributionValueError("no devices given", "pass at least one device")
    if len(set(devices)) != len(devices):
        raise DistributionValueError(f"a device is listed twice in {list(specs)}",
                                     "list each device once")
    return devices

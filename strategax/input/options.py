"""`InputOptions`: how distributed input is placed on the devices, as in TensorFlow, and how a
multi-worker job shares it between the workers (`AutoShardPolicy`)."""
from __future__ import annotations

import enum
from dataclasses import dataclass

from ..errors import DistributionTypeError, DistributionValueError, check_int


class AutoShardPolicy(enum.IntEnum):
    """`tf.data.experimental.AutoShardPolicy` (same values): how `experimental_distribute_dataset`
    shares a dataset between the workers of a multi-worker job."""
    OFF = -1  # every worker reads every batch, cut into per-replica batches (all workers train on the same data)
    AUTO = 0  # FILE when the dataset reads files, else DATA (strategax's datasets read no files: DATA)
    FILE = 1  # each worker reads its own files
    DATA = 2  # each worker reads every batch and keeps its replicas' part


def parse_policy(value) -> AutoShardPolicy:
    """An AutoShardPolicy from ours, TensorFlow's (an IntEnum with the same values), an int or a name."""
    try:
        if isinstance(value, str):
            return AutoShardPolicy[value.upper()]
        return AutoShardPolicy(int(value))
    except (KeyError, ValueError, TypeError):
        raise DistributionValueError(
            f"auto_shard_policy must be one of {[p.name for p in AutoShardPolicy]}, not {value!r:.40} "
            "(TensorFlow's HINT serves the tf.data service, which strategax does not use)",
            "use sx.AutoShardPolicy.AUTO, FILE, DATA or OFF") from None


@dataclass(frozen=True)
class InputOptions:
    """`tf.distribute.InputOptions`: whether and how far ahead input is placed on the devices;
    `auto_shard_policy` (strategax's addition) shares `experimental_distribute_dataset` between
    the workers when the dataset does not say (a tf.data.Dataset's own options do)."""
    experimental_fetch_to_device: bool = True
    experimental_per_replica_buffer_size: int = 1
    experimental_replication_mode: str = "PER_WORKER"
    experimental_place_dataset_on_device: bool = False
    auto_shard_policy: AutoShardPolicy = AutoShardPolicy.AUTO

    def __post_init__(self):
        for name in ("experimental_fetch_to_device", "experimental_place_dataset_on_device"):
            if not isinstance(getattr(self, name), bool):
                raise DistributionTypeError(f"{name} must be True or False, not {getattr(self, name)!r:.40}",
                                            f"pass {name}=True or False")
        check_int(self.experimental_per_replica_buffer_size, "experimental_per_replica_buffer_size", minimum=1)
        object.__setattr__(self, "auto_shard_policy", parse_policy(self.auto_shard_policy))

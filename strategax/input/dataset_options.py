"""`sx.data.Options` as `tf.data.Options` spells what strategax reads of it (the multi-worker
tutorial's `options.experimental_distribute.auto_shard_policy`), and tf.data's constants."""
from __future__ import annotations

from .options import AutoShardPolicy, parse_policy

AUTOTUNE = -1  # tf.data.AUTOTUNE: prefetch's buffer size, chosen by the runtime
INFINITE_CARDINALITY = -1  # tf.data.INFINITE_CARDINALITY
UNKNOWN_CARDINALITY = -2  # tf.data.UNKNOWN_CARDINALITY


class DistributeOptions:
    """`tf.data.experimental.DistributeOptions`: how a multi-worker job shares the dataset."""

    __slots__ = ("_policy", "num_devices")

    def __init__(self):
        self._policy = AutoShardPolicy.AUTO
        self.num_devices = None  # accepted as TensorFlow's; strategax does not read it

    @property
    def auto_shard_policy(self) -> AutoShardPolicy:
        return self._policy

    @auto_shard_policy.setter
    def auto_shard_policy(self, value) -> None:
        self._policy = parse_policy(value)


class Options:
    """`tf.data.Options`: setting an option TensorFlow has that strategax does not read is an
    AttributeError here (as TensorFlow's for a misspelt one), never silently ignored."""

    __slots__ = ("experimental_distribute", "deterministic")

    def __init__(self):
        self.experimental_distribute = DistributeOptions()
        self.deterministic = None  # strategax's host pipeline is always deterministic

    def merge(self, other: "Options") -> "Options":
        """These options with `other`'s set values over them (TensorFlow's `with_options` merge)."""
        out = Options()
        for source in (self, other):
            if source.experimental_distribute.auto_shard_policy is not AutoShardPolicy.AUTO:
                out.experimental_distribute.auto_shard_policy = source.experimental_distribute.auto_shard_policy
            if source.deterministic is not None:
                out.deterministic = source.deterministic
        return out

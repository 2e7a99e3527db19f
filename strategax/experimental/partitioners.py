"""`sx.experimental.partitioners`: TensorFlow's `tf.distribute.experimental.partitioners`."""
from ..distribute.parameter_server import FixedShardsPartitioner, MaxSizePartitioner, MinSizePartitioner, Partitioner

__all__ = ["FixedShardsPartitioner", "MaxSizePartitioner", "MinSizePartitioner", "Partitioner"]

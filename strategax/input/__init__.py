"""Distributed input: datasets split across replicas as TensorFlow splits them, padded to one
static shape with each replica's real row count, placed on the devices ahead of use."""
from .context import InputContext
from .dataset import DistributedDataset, DistributedIterator
from .from_function import DatasetsFromFunction
from .numpy_dataset import Dataset, NumpyDataset
from .optional import Optional
from .options import AutoShardPolicy, InputOptions

__all__ = ["AutoShardPolicy", "Dataset", "DatasetsFromFunction", "DistributedDataset", "DistributedIterator",
           "InputContext", "InputOptions", "NumpyDataset", "Optional"]

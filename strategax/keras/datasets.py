"""Keras' `fit`/`evaluate`/`predict` reading strategax's datasets: an `sx.data.Dataset` (the
tutorials' `from_tensor_slices(...).map(...).cache().batch(...)`) or what
`experimental_distribute_dataset` / `distribute_datasets_from_function` return, through Keras'
public `DataAdapter` contract. Keras' `get_data_adapter` knows none, so `install()` wraps it:
other inputs go to Keras.

Keras sees global batches (it peeks at one to build the model, and on an accelerator moves each
to the device): a distributed dataset gives its source's, and `distribute_datasets_from_function`
each step's per-replica batches joined in replica order, which the model's step splits again. The
step's numbers are the global batch's whichever replica holds a row (functions.py, steps.py)."""
from __future__ import annotations

from typing import Any, Iterator

import jax
import numpy as np

from ..input.dataset import DistributedDataset, host_iterator
from ..input.from_function import DatasetsFromFunction
from ..input.numpy_dataset import Dataset
from ..trace.distributed_values import is_distributed
from .errors import KerasAdapterError

_installed = False


def _global_batches(x: Any) -> Iterator:
    """A new pass over the dataset's global batches (a distributed dataset: its source's)."""
    if isinstance(x, DistributedDataset):
        return host_iterator(x._dataset)
    if isinstance(x, DatasetsFromFunction):
        return _joined(x)
    return iter(x)


def _joined(x: DatasetsFromFunction) -> Iterator:
    """Each step of `distribute_datasets_from_function`'s dataset as one global batch: every
    replica's real rows, in replica order (a replica's scalar element: one row)."""
    strategy = x._strategy
    if x._contexts[0].num_input_pipelines > 1:  # a multi-worker job: one pipeline per worker
        raise KerasAdapterError(
            "Keras was given a distributed dataset from `distribute_datasets_from_function` on a "
            "multi-worker strategy: each worker's pipeline holds only its own replicas' rows, and Keras' "
            "steps read global batches (which strategax shards across the workers itself)",
            "pass the dataset undistributed (`fit(dataset)`; each worker reads its shard by the "
            "AutoShardPolicy), or `strategy.experimental_distribute_dataset(dataset)`")

    def join(v):
        parts = [np.asarray(p) for p in strategy.experimental_local_results(v)]
        if parts and parts[0].ndim == 0:
            return np.stack(parts)
        try:
            return np.concatenate(parts)
        except ValueError:
            raise KerasAdapterError(
                "the replicas' batches of this `distribute_datasets_from_function` dataset differ in "
                f"shape beyond the batch axis ({[p.shape for p in parts]}), so they make no one global "
                "batch for Keras' step", "give every element one shape beyond the batch axis (pad them to "
                "one width)") from None

    for element in x:
        yield jax.tree_util.tree_map(join, element, is_leaf=is_distributed)


def _rows_known(x: Any) -> int | None:
    """The number of batches, when the dataset knows it (TensorFlow's cardinality >= 0)."""
    source = x._dataset if isinstance(x, DistributedDataset) else x
    n = source.cardinality() if isinstance(source, Dataset) else -2  # from a function: unknown steps
    return n if n >= 0 else None


def is_strategax_dataset(x: Any) -> bool:
    return isinstance(x, (Dataset, DistributedDataset, DatasetsFromFunction))


def adapter(x: Any, y: Any, sample_weight: Any, class_weight: Any, shuffle: bool) -> Any:
    """A Keras `DataAdapter` over an sx.data.Dataset (or a distributed one) of (x, y[, w]) batches."""
    from keras.src.trainers.data_adapters import data_adapter_utils
    from keras.src.trainers.data_adapters.data_adapter import DataAdapter

    kind = type(x).__name__
    for value, name in ((y, "y"), (sample_weight, "sample_weight"), (class_weight, "class_weight")):
        if value is not None:
            raise KerasAdapterError(
                f"`{name}` was passed with `x` an {kind}: the dataset's elements carry everything",
                f"put it in the dataset's elements, (x, y) or (x, y, sample_weight), and drop `{name}=`")
    del shuffle  # a dataset is shuffled by its own `.shuffle(n)`, as Keras says of tf.data

    class StrategaxDatasetAdapter(DataAdapter):
        def get_numpy_iterator(self):
            return data_adapter_utils.get_numpy_iterator(_global_batches(x))

        def get_jax_iterator(self):
            return data_adapter_utils.get_jax_iterator(_global_batches(x))

        def get_tf_dataset(self):
            raise KerasAdapterError(f"Keras asked an {kind} for a tf.data.Dataset (its TensorFlow backend)",
                                    "set KERAS_BACKEND=jax before importing Keras")

        def get_torch_dataloader(self):
            raise KerasAdapterError(f"Keras asked an {kind} for a torch DataLoader (its torch backend)",
                                    "set KERAS_BACKEND=jax before importing Keras")

        @property
        def num_batches(self):
            return _rows_known(x)

        @property
        def batch_size(self):
            return None

        @property
        def has_partial_batch(self):
            return None

        @property
        def partial_batch_size(self):
            return None

    return StrategaxDatasetAdapter()


def install() -> None:
    """Wrap Keras' `get_data_adapter` (once per process) so that `fit(sx_dataset)` works."""
    global _installed
    if _installed:
        return
    from keras.src.trainers import data_adapters

    original = data_adapters.get_data_adapter

    def get_data_adapter(x, y=None, sample_weight=None, batch_size=None, steps_per_epoch=None,
                         shuffle=False, class_weight=None):
        if is_strategax_dataset(x):
            return adapter(x, y, sample_weight, class_weight, shuffle)
        return original(x, y=y, sample_weight=sample_weight, batch_size=batch_size,
                        steps_per_epoch=steps_per_epoch, shuffle=shuffle, class_weight=class_weight)

    get_data_adapter.__wrapped__ = original  # type: ignore[attr-defined]
    data_adapters.get_data_adapter = get_data_adapter
    _installed = True

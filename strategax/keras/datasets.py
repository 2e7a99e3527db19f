"""Keras' `fit`/`evaluate`/`predict` reading strategax's datasets: an `sx.data.Dataset` (the
tutorials' `from_tensor_slices(...).map(...).cache().batch(...)`) or what
`experimental_distribute_dataset` returns, through Keras' public `DataAdapter` contract.
Keras' `get_data_adapter` knows neither, so `install()` wraps it: other inputs go to Keras."""
from __future__ import annotations

from typing import Any, Iterator

from ..input.dataset import DistributedDataset, host_iterator
from ..input.numpy_dataset import Dataset
from .errors import KerasAdapterError

_installed = False


def _global_batches(x: Any) -> Iterator:
    """A new pass over the dataset's global batches (a distributed dataset: its source's)."""
    if isinstance(x, DistributedDataset):
        return host_iterator(x._dataset)
    return iter(x)


def _rows_known(x: Any) -> int | None:
    """The number of batches, when the dataset knows it (TensorFlow's cardinality >= 0)."""
    source = x._dataset if isinstance(x, DistributedDataset) else x
    n = source.cardinality() if isinstance(source, Dataset) else -2
    return n if n >= 0 else None


def is_strategax_dataset(x: Any) -> bool:
    return isinstance(x, (Dataset, DistributedDataset))


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

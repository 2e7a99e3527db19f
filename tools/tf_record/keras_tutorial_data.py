"""The "Distributed training with Keras" tutorial's data and initial weights, made in NumPy from
seeds so that TensorFlow's recording (record_keras_tutorial.py) and strategax's test
(tests/test_keras_tutorial.py, which imports this file) train on the same numbers. Plain NumPy:
no TensorFlow, no strategax."""
import hashlib

import numpy as np

TRAIN_ROWS, TEST_ROWS = 600, 200  # 600 = 4 x 128 + 88 and 512 + 88: every batch splits evenly on 2 and 8
DATA_SEED, WEIGHTS_SEED = 34, 3434


def mnist_standin():
    """((train images, labels), (test images, labels)): uint8 28x28x1 images and int64 labels as
    tfds' MNIST gives them; the label is the brightest of ten horizontal bands (learnable)."""
    rng = np.random.default_rng(DATA_SEED)
    out = []
    for rows in (TRAIN_ROWS, TEST_ROWS):
        images = rng.integers(0, 256, size=(rows, 28, 28, 1), dtype=np.uint8)
        bands = images[:, :20, :, 0].astype(np.int64).reshape(rows, 10, 2 * 28).sum(axis=2)
        labels = np.argmax(bands, axis=1).astype(np.int64)
        out.append((images, labels))
    return tuple(out)


def initial_weights(shapes):
    """One array per weight shape (the model's `get_weights()` order): Glorot-uniform kernels and
    small uniform biases from WEIGHTS_SEED."""
    rng = np.random.default_rng(WEIGHTS_SEED)
    weights = []
    for shape in shapes:
        if len(shape) == 1:
            weights.append(rng.uniform(-0.05, 0.05, size=shape).astype(np.float32))
        else:
            receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
            fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            weights.append(rng.uniform(-limit, limit, size=shape).astype(np.float32))
    return weights


def digest(arrays):
    """A short hash of arrays' bytes: both sides check they made the same numbers."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]

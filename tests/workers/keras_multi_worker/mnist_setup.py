"""The "Multi-worker training with Keras" tutorial's `mnist_setup.py`, with a small MNIST
stand-in (no download; tiny so the test is fast) and these changes, each needed for the test to
compare numbers: 10x10 images from a seed (the label is the brightest of the ten rows),
`keras`/`sx.data` for `tf.keras`/`tf.data`, a seeded shuffle that keeps one order for every
repetition (a job restarted from a per-epoch backup reads its epochs from a new iterator, as
TensorFlow's does: with one order per repetition and an epoch of one repetition it reads the
batches the uninterrupted run read), smaller layers, `set_random_seed` (the model built for the
second `fit` starts from the first one's weights) and a learning rate at which a few steps move
the weights measurably."""
import keras
import numpy as np

import strategax as sx

ROWS, SIZE, SEED = 64, 10, 34


def load_data():
    """(images, labels): uint8 SIZE x SIZE images and int64 labels, as mnist.load_data gives them."""
    rng = np.random.default_rng(SEED)
    images = rng.integers(0, 256, size=(ROWS, SIZE, SIZE), dtype=np.uint8)
    labels = np.argmax(images.astype(np.int64).sum(axis=2), axis=1).astype(np.int64)
    return images, labels


def mnist_dataset(batch_size):
  x_train, y_train = load_data()
  # The `x` arrays are in uint8 and have values in the [0, 255] range.
  # You need to convert them to float32 with values in the [0, 1] range.
  x_train = x_train / np.float32(255)
  y_train = y_train.astype(np.int64)
  train_dataset = sx.data.Dataset.from_tensor_slices(
      (x_train, y_train)).shuffle(ROWS, seed=SEED, reshuffle_each_iteration=False).repeat().batch(batch_size)
  return train_dataset


def build_and_compile_cnn_model():
  keras.utils.set_random_seed(SEED)
  model = keras.Sequential([
      keras.layers.InputLayer(input_shape=(SIZE, SIZE)),
      keras.layers.Reshape(target_shape=(SIZE, SIZE, 1)),
      keras.layers.Conv2D(4, 3, activation='relu'),
      keras.layers.Flatten(),
      keras.layers.Dense(16, activation='relu'),
      keras.layers.Dense(10)
  ])
  model.compile(
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      optimizer=keras.optimizers.SGD(learning_rate=0.1),
      metrics=['accuracy'])
  return model

"""Record TensorFlow 2.21's "Distributed training with Keras" tutorial (issue 34) under
tf.distribute.MirroredStrategy with Keras 3 (what TF 2.21 pulls in), on an MNIST stand-in made in
NumPy (keras_tutorial_data.py: the same rows and initial weights strategax's test uses), the
tutorial's CNN and loss, no shuffle, and SGD (plus an Adam run): per-epoch losses and accuracies,
the learning rate each epoch as PrintLR reads it, evaluate's results after load_weights(latest),
after model.save + keras.models.load_model out of and in a scope, and the first test rows'
predictions. `partial_batch` records TF's gradient on a batch that does not split evenly (the
mean of the replicas' mean losses) against one device's. Writes tests/data/tf/keras_tutorial.json
via run_all.sh; each scenario runs in its own process.
"""

import glob
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import scenario, main, mirrored  # noqa: E402
import keras_tutorial_data as data  # noqa: E402

EPOCHS = 4  # the tutorial's 12, cut to 4: decay() still changes the rate at epoch 3
BATCH_SIZE_PER_REPLICA = 64


def _tutorial(tf, n, optimizer_name):
    """The tutorial with `strategy = MirroredStrategy(n CPUs)`; returns what it prints and more."""
    import keras
    import numpy as np
    assert keras.__version__.startswith("3."), keras.__version__
    strategy = mirrored(tf, n)
    (x_train, y_train), (x_test, y_test) = data.mnist_standin()
    mnist_train = tf.data.Dataset.from_tensor_slices((x_train, y_train))
    mnist_test = tf.data.Dataset.from_tensor_slices((x_test, y_test))
    BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync

    def scale(image, label):
        image = tf.cast(image, tf.float32)
        image /= 255
        return image, label

    train_dataset = mnist_train.map(scale).cache().batch(BATCH_SIZE)  # the tutorial shuffles: not here
    eval_dataset = mnist_test.map(scale).batch(BATCH_SIZE)

    def make_optimizer():
        return keras.optimizers.SGD() if optimizer_name == "sgd" else keras.optimizers.Adam()

    with strategy.scope():
        model = keras.Sequential([
            keras.layers.Input(shape=(28, 28, 1)),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10),
        ])
        model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      optimizer=make_optimizer(), metrics=["accuracy"])
    weights = data.initial_weights([w.shape for w in model.get_weights()])
    model.set_weights(weights)

    checkpoint_dir = tempfile.mkdtemp()
    checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt_{epoch}.weights.h5")  # Keras 3's suffix

    def decay(epoch):
        if epoch < 3:
            return 1e-3
        elif epoch >= 3 and epoch < 7:
            return 1e-4
        else:
            return 1e-5

    printed = []

    class PrintLR(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            printed.append(float(np.asarray(model.optimizer.learning_rate)))

    callbacks = [
        keras.callbacks.ModelCheckpoint(filepath=checkpoint_prefix, save_weights_only=True),
        keras.callbacks.LearningRateScheduler(decay),
        PrintLR(),
    ]
    history = model.fit(train_dataset, epochs=EPOCHS, callbacks=callbacks, verbose=0)
    final = model.get_weights()
    latest = max(glob.glob(os.path.join(checkpoint_dir, "ckpt_*.weights.h5")),
                 key=lambda p: int(p.rsplit("_", 1)[1].split(".")[0]))  # tf.train.latest_checkpoint reads no .h5
    model.load_weights(latest)
    eval_loss, eval_acc = model.evaluate(eval_dataset, verbose=0)
    predictions = model.predict(eval_dataset, verbose=0)

    path = os.path.join(tempfile.mkdtemp(), "model.keras")
    model.save(path)
    unreplicated_model = keras.models.load_model(path)
    unreplicated_model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                               optimizer=make_optimizer(), metrics=["accuracy"])
    unreplicated = unreplicated_model.evaluate(eval_dataset, verbose=0)
    with strategy.scope():
        replicated_model = keras.models.load_model(path)
        replicated_model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                                 optimizer=make_optimizer(), metrics=["accuracy"])
        replicated = replicated_model.evaluate(eval_dataset, verbose=0)
    return {
        "keras_version": keras.__version__, "optimizer": optimizer_name, "epochs": EPOCHS,
        "batch_size": BATCH_SIZE, "data_digest": data.digest([x_train, y_train, x_test, y_test]),
        "weights_digest": data.digest(weights),
        "history": {k: [float(v) for v in vs] for k, vs in history.history.items()},
        "printed_learning_rates": printed,
        "checkpoints": sorted(os.path.basename(p) for p in glob.glob(os.path.join(checkpoint_dir, "*"))),
        "final_weights": {"sum": [float(np.sum(w, dtype=np.float64)) for w in final],
                          "abs_sum": [float(np.sum(np.abs(w), dtype=np.float64)) for w in final],
                          "first": [np.ravel(w)[:4].tolist() for w in final]},
        "evaluate": [float(eval_loss), float(eval_acc)],
        "predict_rows": int(predictions.shape[0]), "predict_first": predictions[:3].tolist(),
        "evaluate_unreplicated": [float(v) for v in unreplicated],
        "evaluate_replicated": [float(v) for v in replicated],
    }


@scenario("tutorial_sgd", devices=(1, 2, 8))
def tutorial_sgd(tf, n):
    """The tutorial with SGD (the rate set by LearningRateScheduler's decay) on n CPU replicas."""
    return _tutorial(tf, n, "sgd")


@scenario("tutorial_adam", devices=(2,))
def tutorial_adam(tf, n):
    """The tutorial as written (Adam) on n CPU replicas."""
    return _tutorial(tf, n, "adam")


@scenario("partial_batch", devices=(2,))
def partial_batch(tf, n):
    """fit of Dense(1) (MSE, SGD lr 0.1) on 5 rows, batch 4: the last batch of one row goes to
    replica 0 and none to replica 1. TF's weights after each step against one device's (the same
    model without a strategy): TF's step on the partial batch is half one device's."""
    import keras
    import numpy as np
    x = np.arange(10, dtype=np.float32).reshape(5, 2) / 10
    y = np.array([[1.0], [0.0], [2.0], [1.0], [3.0]], dtype=np.float32)
    init = [np.array([[0.5], [-0.25]], np.float32), np.array([0.1], np.float32)]

    def run(strategy):
        scope = strategy.scope() if strategy is not None else _null()
        with scope:
            model = keras.Sequential([keras.layers.Input(shape=(2,)), keras.layers.Dense(1)])
            model.compile(loss="mse", optimizer=keras.optimizers.SGD(0.1))
        model.set_weights(init)
        steps = []

        class Record(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                steps.append([w.ravel().tolist() for w in model.get_weights()])
        history = model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=[Record()])
        return {"weights_after_each_step": steps, "loss": history.history["loss"]}
    return {"mirrored": run(mirrored(tf, n)), "one_device": run(None)}


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    main()

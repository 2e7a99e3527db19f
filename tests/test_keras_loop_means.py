"""A Keras mean loss inside an on-device loop (`for _ in sx.range(n)`, `for x in dist_dataset`
in a `strategy.function`) over a dataset whose last batch is partial: each replica's mean
divides by its real row count, not its padded one, so weighting the replicas' means by their
real rows gives one device's loss and weights (plain Keras + JAX on one device, no strategax).

Keras traces a mean as `divide_no_nan(sum, prod(shape))`; in a loop body that divisor is a
loop constant operand, which the `mask-padding` pass follows out to the enclosing constant."""
import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import strategax as sx  # noqa: E402

ROWS, BATCH, LR, TOL = 105, 64, 0.5, 1e-5  # batches of 64 and 41 rows
rng = np.random.default_rng(7)
X = rng.normal(size=(ROWS, 4)).astype("float32")
Y = rng.integers(0, 3, size=(ROWS,)).astype("int32")
BATCHES = [(X[i:i + BATCH], Y[i:i + BATCH]) for i in range(0, ROWS, BATCH)]


def create_model():
    keras.utils.set_random_seed(3)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(5, activation="tanh"), keras.layers.Dense(3)])


def mean_loss():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)  # reduction: the batch mean


@pytest.fixture(scope="module")
def one_device():
    """Each batch's mean loss and the weights after SGD on it, on one device (plain Keras + JAX)."""
    model, loss_object = create_model(), mean_loss()

    def loss_fn(weights, x, y):
        with keras.StatelessScope(state_mapping=zip(model.trainable_variables, weights)):
            return loss_object(y, model(x))

    grad = jax.jit(jax.value_and_grad(loss_fn))
    weights, losses = [v.value for v in model.trainable_variables], []
    for x, y in BATCHES:
        loss, g = grad(weights, x, y)
        weights = [w - LR * gw for w, gw in zip(weights, g)]
        losses.append(float(loss))
    return losses, [np.asarray(w) for w in weights]


def train(strategy, loop: str):
    """The steps as a custom loop would write them, all batches in one call (the losses' total
    and the last one back): the loss is each
    replica's Keras mean weighted by its share of the batch's real rows, the gradients summed
    across replicas by the Keras optimizer (TensorFlow's merge_call recipe)."""
    with strategy.scope():
        model, loss_object = create_model(), mean_loss()
        optimizer = keras.optimizers.SGD(LR)

    def replica_step(inputs):
        x, y = inputs
        rows = jnp.sum(sx.nn.batch_mask(y)).astype("float32")
        share = rows / sx.get_replica_context().all_reduce("SUM", rows)

        def loss_fn(weights):
            with keras.StatelessScope(state_mapping=zip(model.trainable_variables, weights)):
                return loss_object(y, model(x, training=True)) * share

        loss, grads = jax.value_and_grad(loss_fn)([v.value for v in model.trainable_variables])
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def step(inputs):
        return strategy.reduce("SUM", strategy.run(replica_step, args=(inputs,)), axis=None)

    dist = strategy.experimental_distribute_dataset(BATCHES)
    if loop == "sx.range":
        @strategy.function
        def train_steps(iterator):
            total, last = jnp.zeros(()), jnp.zeros(())
            for _ in sx.range(len(BATCHES)):
                last = step(next(iterator))
                total += last
            return total, last
        args = iter(dist)
    else:
        @strategy.function
        def train_steps(dataset):
            total, last = jnp.zeros(()), jnp.zeros(())
            for x in dataset:
                last = step(x)
                total += last
            return total, last
        args = dist
    ir = str(train_steps.ir(args))
    total, last = train_steps(args)
    return [float(total), float(last)], [np.asarray(w) for w in model.get_weights()], ir


@pytest.mark.parametrize("loop", ["sx.range", "for x in dataset"])
@pytest.mark.parametrize("replicas", [2, 8])
def test_keras_mean_loss_in_a_loop_equals_one_device(one_device, replicas, loop):
    # Intent: a Keras mean over a padded partial batch inside an on-device loop counts the real
    # rows only (its divisor, a loop constant, is followed out of the loop and folded).
    losses, weights, ir = train(sx.MirroredStrategy([f"CPU:{i}" for i in range(replicas)]), loop)
    assert ir.count("jax.while") == 1  # the steps are one on-device loop
    ref_losses, ref_weights = one_device
    np.testing.assert_allclose(losses, [sum(ref_losses), ref_losses[-1]], rtol=TOL, atol=TOL)
    for w, r in zip(weights, ref_weights):
        np.testing.assert_allclose(w, r, rtol=TOL, atol=TOL)

"""sx.nn's loss helpers and sx.metrics against TensorFlow 2.21 (tests/data/tf/losses_metrics.json,
recorded by tools/tf_record/record_losses_metrics.py): compute_average_loss's divisor on a
partial batch, scale_regularization_loss, their errors in cross-replica context, and Mean /
SparseCategoricalAccuracy updated inside strategy.run."""
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import strategax as sx
from conftest import assert_names_this_line, here

REC = json.loads((Path(__file__).parent / "data" / "tf" / "losses_metrics.json").read_text())["scenarios"]
LOSSES = REC["losses_r2"]["result"]
METRICS = REC["metrics_r2"]["result"]


def values(rec):
    return [c["value"] for c in rec]


def strategy():
    return sx.MirroredStrategy(["CPU:0", "CPU:1"])


def batch(s, data):
    return next(iter(s.experimental_distribute_dataset([np.asarray(data, np.float32)])))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "function"])
def test_compute_average_loss_divides_as_tensorflow(compiled):
    # Intent: without global_batch_size each replica divides by its own rows times the replica
    # count (replica 0: 6 / (3*2), replica 1: 9 / (2*2)); with it, by it; an empty replica gives
    # 0; sample weights scale; scale_regularization_loss divides by the replica count.
    s = strategy()
    run = (lambda f, *a: s.function(lambda *b: s.run(f, args=b))(*a)) if compiled else \
        (lambda f, *a: s.run(f, args=a))
    x = batch(s, [1.0, 2.0, 3.0, 4.0, 5.0])

    def local(v):
        return [float(c) for c in s.experimental_local_results(v)]

    np.testing.assert_allclose(local(run(sx.nn.compute_average_loss, x)), values(LOSSES["average_no_gbs"]))
    np.testing.assert_allclose(local(run(lambda v: sx.nn.compute_average_loss(v, global_batch_size=5), x)),
                               values(LOSSES["average_gbs5"]), rtol=1e-6)
    np.testing.assert_allclose(
        local(run(lambda v: sx.nn.compute_average_loss(v, sample_weight=2.0 * jnp.ones_like(v),
                                                       global_batch_size=5), x)),
        values(LOSSES["average_weighted"]), rtol=1e-6)
    np.testing.assert_allclose(local(run(sx.nn.compute_average_loss, batch(s, [3.0]))),
                               values(LOSSES["average_empty_replica"]))
    np.testing.assert_allclose(
        local(run(lambda v: sx.nn.scale_regularization_loss(jnp.array([0.5, 1.5])) + 0 * jnp.sum(v), x)),
        values(LOSSES["scale_regularization"]))


def test_loss_helpers_raise_in_cross_replica_context():
    # Intent: inside a scope but outside run both helpers raise (TF: RuntimeError) naming the
    # user's line; with no strategy compute_average_loss is the plain mean (TF: 2.0).
    s = strategy()
    assert LOSSES["average_cross_replica"]["error"] == LOSSES["scale_cross_replica"]["error"] == "RuntimeError"
    with s.scope():
        line = here() + 2
        with pytest.raises(RuntimeError) as e:
            sx.nn.compute_average_loss(jnp.array([1.0, 2.0]))
        assert_names_this_line(e, line)
        line = here() + 2
        with pytest.raises(RuntimeError) as e:
            sx.nn.scale_regularization_loss(jnp.array([1.0, 2.0]))
        assert_names_this_line(e, line)
    assert float(sx.nn.compute_average_loss(jnp.array([1.0, 2.0, 3.0]))) == LOSSES["average_no_strategy"]["value"]


def test_metrics_under_a_strategy_match_keras():
    # Intent: Mean and SparseCategoricalAccuracy updated in strategy.run keep each replica's
    # total and count in sync-on-read SUM variables and read TensorFlow's results; reset_state
    # zeroes them; a weighted Mean weighs.
    s = strategy()
    labels = np.array([0, 1, 2, 1, 0], np.int32)
    logits = np.eye(3, dtype=np.float32)[[0, 2, 2, 1, 1]]
    data = [(labels, logits, np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32))]
    with s.scope():
        acc = sx.metrics.SparseCategoricalAccuracy(name="acc")
        mean = sx.metrics.Mean(name="loss")

    @s.function
    def step(b):
        def fn(y, p, v):
            acc.update_state(y, p)
            mean.update_state(v)
        s.run(fn, args=b)

    step(next(iter(s.experimental_distribute_dataset(data))))
    assert isinstance(acc.total, sx.SyncOnReadVariable) and acc.total.aggregation == sx.VariableAggregation.SUM
    assert METRICS["acc_synchronization"] == ["on_read"] * 2 and METRICS["acc_aggregation"] == ["sum"] * 2
    assert acc.total.synchronization == sx.VariableSynchronization.ON_READ
    np.testing.assert_allclose(float(acc.result()), METRICS["acc_result"]["value"], rtol=1e-6)
    np.testing.assert_allclose(float(mean.result()), METRICS["mean_result"]["value"])
    for metric, rec in ((acc, METRICS["acc_variables"]), (mean, METRICS["mean_variables"])):
        for var, name in ((metric.total, "total"), (metric.count, "count")):
            np.testing.assert_allclose([float(np.asarray(c)) for c in var.values], values(rec[name]["values"]))
    step(next(iter(s.experimental_distribute_dataset(data))))
    np.testing.assert_allclose(float(acc.result()), METRICS["acc_after_two"]["value"], rtol=1e-6)
    np.testing.assert_allclose(float(mean.result()), METRICS["mean_after_two"]["value"])
    acc.reset_state()
    mean.reset_state()
    assert float(acc.result()) == METRICS["acc_after_reset"]["value"]
    assert float(mean.result()) == METRICS["mean_after_reset"]["value"]
    plain = sx.metrics.Mean()  # outside any strategy: plain variables
    plain.update_state(jnp.array([2.0, 4.0]), sample_weight=jnp.array([1.0, 3.0]))
    np.testing.assert_allclose(float(plain.result()), METRICS["mean_weighted"]["value"])

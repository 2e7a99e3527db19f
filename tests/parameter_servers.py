"""Parameter-server jobs for the tests, on the session's Ray cluster: `job` starts one for a
test (and stops it), `shared` starts one the first time a test asks for it by name and keeps it
for the session (actors take seconds to start: tests that leave a job healthy share it)."""
import contextlib
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import strategax as sx

_SHARED: dict = {}
# 1 worker and 2 parameter servers on this machine, as a TF_CONFIG (the chief is the test process)
TF_CONFIG = {"cluster": {"chief": ["127.0.0.1:2222"], "worker": ["localhost:2223"],
                         "ps": ["127.0.0.1:2224", "localhost:2225"]}, "task": {"type": "chief", "index": 0}}


def _strategy(num_workers, num_ps, devices_per_worker=1, partitioner=None, tf_config=None):
    if tf_config is not None:
        saved = os.environ.get("TF_CONFIG")
        os.environ["TF_CONFIG"] = json.dumps(tf_config)
        try:
            resolver = sx.cluster_resolver.TFConfigClusterResolver()
        finally:
            os.environ.pop("TF_CONFIG") if saved is None else os.environ.__setitem__("TF_CONFIG", saved)
    else:
        resolver = sx.cluster_resolver.RayClusterResolver(num_workers, num_ps, devices_per_worker=devices_per_worker)
    return sx.experimental.ParameterServerStrategy(resolver, variable_partitioner=partitioner)


@contextlib.contextmanager
def job(num_workers: int = 0, num_ps: int = 0, **options):
    """A ParameterServerStrategy of its own for one test (its actors stopped afterwards)."""
    strategy = _strategy(num_workers, num_ps, **options)
    try:
        yield strategy
    finally:
        strategy._shutdown()


def shared(name: str, num_workers: int = 0, num_ps: int = 0, **options):
    """The session's job called `name` (started on first use); tests leave its partitioner None."""
    if name not in _SHARED:
        _SHARED[name] = _strategy(num_workers, num_ps, **options)
    strategy = _SHARED[name]
    strategy._partitioner = None
    return strategy


def stop_shared() -> None:
    while _SHARED:
        _SHARED.popitem()[1]._shutdown()


def server_of(var) -> int:
    """The parameter server that holds `var` (TensorFlow's device /job:ps/task:N)."""
    return var._store.ref.ps


def counting_steps(strategy, steps: int, pause: float, pause_after: float = 0.0):
    """A variable `hits` of `steps` zeros and a function to schedule, `step(i)`: it sleeps
    `pause` seconds (so steps are in flight when a fault lands), adds one_hot(i) to `hits` in a
    compiled update, then sleeps `pause_after`. Every step run exactly once leaves `hits` all ones."""
    with strategy.scope():
        hits = sx.Variable(np.zeros(steps, np.int32), name="hits")

    @strategy.function
    def mark(i):
        hits.assign_add(jax.nn.one_hot(i, steps, dtype=jnp.int32))

    def step(i):
        time.sleep(pause)
        mark(i)
        time.sleep(pause_after)
    return hits, step

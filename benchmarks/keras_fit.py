"""`model.fit` step time of Keras 3 models (a CNN, the tutorial's; a small Transformer encoder
classifier) on 8 simulated CPU devices: compiled in a strategax `MirroredStrategy` scope against
Keras 3's own `keras.distribution.DataParallel` on the same devices (full batches, SGD), timed
interleaved in one process (ABBA rounds of one `fit` epoch each, after a warm-up epoch that
compiles), and against TensorFlow 2.21's `tf.distribute.MirroredStrategy` `fit` (same models,
8 logical CPU devices) run in a subprocess of /work/tfvenv when it exists (TF_PYTHON to change;
skipped with a message otherwise). Prints the median step time of each and the ratios, in wall
time and in the CPU time of the process (all its threads: the 8 simulated devices' work and the
host's; on a machine shared with other jobs it moves far less than wall time), and the load.

With `--programs`, also the compiled train-step programs alone (no `fit` loop, no host work):
strategax's full-batch program against `jax.jit` of Keras' `train_step` under DataParallel (what
its `fit` runs), CPU time of 5 calls per side per round, interleaved, and how many of each
program's dots XLA:CPU left to its generic emitter (the rest run in YNNPACK).

Run: KERAS_BACKEND=jax python benchmarks/keras_fit.py [--steps 20] [--rounds 5] [--model cnn|transformer|both]
     [--programs]
"""
import os
import sys

if "--tf-child" not in sys.argv:
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import bench_device as device  # noqa: E402 - sets JAX's flags: before jax

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

REPLICAS = 8
BATCH = {"cnn": 64 * REPLICAS, "transformer": 16 * REPLICAS}  # global batch: full on 8 replicas


def data(kind: str, steps: int):
    rng = np.random.default_rng(0)
    rows = BATCH[kind] * steps
    if kind == "cnn":
        return rng.random((rows, 28, 28, 1), dtype=np.float32), rng.integers(0, 10, rows).astype(np.int32)
    return rng.integers(0, 1000, (rows, 64)).astype(np.int32), rng.integers(0, 10, rows).astype(np.int32)


def build(keras, kind: str):
    """The model, compiled (SGD, sparse cross-entropy from logits)."""
    if kind == "cnn":
        model = keras.Sequential([
            keras.layers.Input(shape=(28, 28, 1)), keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(), keras.layers.Flatten(), keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10)])
    else:
        tokens = keras.Input(shape=(64,), dtype="int32")
        h = keras.layers.Embedding(1000, 64)(tokens)
        for _ in range(2):
            a = keras.layers.MultiHeadAttention(num_heads=4, key_dim=16)(h, h)
            h = keras.layers.LayerNormalization()(h + a)
            m = keras.layers.Dense(256, activation="gelu")(h)
            h = keras.layers.LayerNormalization()(h + keras.layers.Dense(64)(m))
        logits = keras.layers.Dense(10)(keras.layers.GlobalAveragePooling1D()(h))
        model = keras.Model(tokens, logits)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=keras.optimizers.SGD(0.01))
    return model


def epoch_time(model, x, y, batch: int, scope=None) -> tuple[float, float]:
    """(wall, process CPU) seconds per step of one fit epoch (every batch full)."""
    import contextlib
    with scope() if scope is not None else contextlib.nullcontext():
        start, cpu = time.perf_counter(), time.process_time()
        model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
        steps = len(x) // batch
        return (time.perf_counter() - start) / steps, (time.process_time() - cpu) / steps


def load() -> str:
    """The 1-minute load average (`uptime`'s first figure), for the record."""
    return f"{os.getloadavg()[0]:.1f}"


def tf_child(kind: str, steps: int, rounds: int) -> None:
    """In /work/tfvenv: the same model under tf.distribute.MirroredStrategy; prints JSON."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * REPLICAS)
    import keras
    strategy = tf.distribute.MirroredStrategy([f"CPU:{i}" for i in range(REPLICAS)])
    with strategy.scope():
        model = build(keras, kind)
    x, y = data(kind, steps)
    epoch_time(model, x, y, BATCH[kind])  # compiles
    times = [epoch_time(model, x, y, BATCH[kind]) for _ in range(rounds)]
    print(json.dumps({"tf": tf.__version__, "keras": keras.__version__, "load": load(),
                      "median": statistics.median(t[0] for t in times),
                      "cpu": statistics.median(t[1] for t in times)}))


def tf_figure(kind: str, steps: int, rounds: int) -> dict | None:
    python = os.environ.get("TF_PYTHON", "/work/tfvenv/bin/python")
    if not os.path.exists(python):
        print(f"  TensorFlow: not run ({python} not found; set TF_PYTHON to an interpreter with tensorflow 2.21)")
        return None
    env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "XLA_FLAGS", "JAX_PLATFORMS")}
    p = subprocess.run([python, __file__, "--tf-child", "--model", kind, "--steps", str(steps),
                        "--rounds", str(rounds)], capture_output=True, text=True, env=env, timeout=1800)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode or not lines:
        print(f"  TensorFlow: failed ({p.stderr.strip().splitlines()[-1:]})")
        return None
    return json.loads(lines[-1])


def generic_dots(compiled) -> int:
    """Dots of the compiled program's entry computation that XLA:CPU left to its generic emitter
    (a dot inside a YNNPACK fusion is in a fused computation, not the entry's)."""
    import re
    text = compiled.as_text()
    return len(re.findall(r"= \S+ dot\(", text[text.index("\nENTRY"):]))


def programs(ours, theirs, parallel, x, y, rounds: int) -> None:
    """The two compiled train-step programs alone, CPU time per call, interleaved rounds."""
    import jax
    from keras.src.backend.jax.trainer import _distribute_data

    import strategax as sx
    f = sx.keras.train_function(ours)
    args = sx.keras.step_arguments(ours, x, y)
    c_ours = f.lowered(*args).compile()
    _, global_args = f._lowering_args(args, {})  # the arrays the program takes (bench-only, private)
    global_args = jax.device_put(list(global_args), list(c_ours.input_shardings[0]))
    with parallel.scope():
        state = theirs._get_jax_state(True, True, True, True)
        batch = _distribute_data((x, y))
        c_theirs = jax.jit(theirs.train_step, out_shardings=(None, theirs._get_state_sharding_spec())) \
            .lower(state, batch).compile()
    calls = {"strategax": lambda: c_ours(*global_args), "DataParallel": lambda: c_theirs(state, batch)}
    times: dict[str, list[float]] = {k: [] for k in calls}
    for i in range(rounds):
        for k in (list(calls) if i % 2 == 0 else list(calls)[::-1]):
            jax.block_until_ready(calls[k]())
            cpu = time.process_time()
            for _ in range(5):
                jax.block_until_ready(calls[k]())
            times[k].append((time.process_time() - cpu) / 5)
    ratios = [a / b for a, b in zip(times["strategax"], times["DataParallel"])]
    print(f"  programs alone, CPU ms/step: strategax {statistics.median(times['strategax']) * 1e3:8.2f}, "
          f"DataParallel {statistics.median(times['DataParallel']) * 1e3:8.2f}; strategax / DataParallel median "
          f"{statistics.median(ratios):.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f}); dots in XLA's generic "
          f"emitter: strategax {generic_dots(c_ours)}, DataParallel {generic_dots(c_theirs)}")


def compare(kind: str, steps: int, rounds: int, alone: bool = False) -> None:
    import keras

    import strategax as sx
    devs = device.devices(REPLICAS)
    x, y = data(kind, steps)
    batch = BATCH[kind]
    strategy = sx.MirroredStrategy([f"CPU:{i}" for i in range(REPLICAS)])
    with strategy.scope():
        ours = build(keras, kind)
    parallel = keras.distribution.DataParallel(devices=devs)
    with parallel.scope():
        theirs = build(keras, kind)
    theirs.set_weights(ours.get_weights())
    t0 = time.perf_counter()
    epoch_time(ours, x, y, batch)
    first_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    epoch_time(theirs, x, y, batch, parallel.scope)
    first_theirs = time.perf_counter() - t0
    t_ours, t_theirs = [], []
    start_load = load()
    for i in range(rounds):
        pair = [lambda: t_ours.append(epoch_time(ours, x, y, batch)),
                lambda: t_theirs.append(epoch_time(theirs, x, y, batch, parallel.scope))]
        for f in (pair if i % 2 == 0 else pair[::-1]):
            f()
    print(f"{kind}: global batch {batch}, {steps} steps per epoch, {rounds} rounds (load {start_load} -> {load()})")
    print(f"  first epoch (compiles): strategax {first_ours:.2f} s, DataParallel {first_theirs:.2f} s")
    medians = {}
    for k, what in enumerate(("wall", "CPU")):
        ratios = [a[k] / b[k] for a, b in zip(t_ours, t_theirs)]
        m_ours, m_theirs = (statistics.median(t[k] for t in ts) for ts in (t_ours, t_theirs))
        medians[what] = m_ours
        print(f"  {what:4s} ms/step: strategax {m_ours * 1e3:8.2f}, DataParallel {m_theirs * 1e3:8.2f}; "
              f"strategax / DataParallel median {statistics.median(ratios):.3f} "
              f"(rounds {min(ratios):.3f}-{max(ratios):.3f})")
    if alone:
        programs(ours, theirs, parallel, x[:batch], y[:batch], rounds)
    tf = tf_figure(kind, steps, rounds)
    if tf is not None:
        print(f"  TF {tf['tf']} MirroredStrategy (Keras {tf['keras']}, another process, load {tf['load']}): "
              f"wall {tf['median'] * 1e3:8.2f} ms/step, CPU {tf['cpu'] * 1e3:8.2f} ms/step; strategax / TF "
              f"wall {medians['wall'] / tf['median']:.3f}, CPU {medians['CPU'] / tf['cpu']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20, help="steps per fit epoch")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", choices=("cnn", "transformer", "both"), default="both")
    parser.add_argument("--programs", action="store_true",
                        help="also time the compiled train-step programs alone (no fit loop)")
    parser.add_argument("--tf-child", action="store_true", help=argparse.SUPPRESS)
    if "--tf-child" not in sys.argv:
        device.add_argument(parser)
    args = parser.parse_args()
    if args.tf_child:
        tf_child(args.model, args.steps, args.rounds)
        return
    import keras
    print(device.describe(device.devices(REPLICAS)) + f", Keras {keras.__version__}")
    for kind in (("cnn", "transformer") if args.model == "both" else (args.model,)):
        compare(kind, args.steps, args.rounds, args.programs)


if __name__ == "__main__":
    main()

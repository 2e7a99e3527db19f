"""Memory before running, checked against the device: an MLP (widths WIDTH, DEPTH layers)
trained by Adam under MirroredStrategy over the local devices. Prints `f.stats(batch).memory`
(from XLA's analysis of the compiled step) and, where the device reports it (GPU, TPU), the
measured peak of one step: `peak_bytes_in_use` after the step less what was on the device
before it that the step does not take (measured program peak, comparable with XLA's `peak`).
Then profiles 3 steps (`sx.profile`) and prints where the time went.

Run: python benchmarks/memory_prediction.py [--width 4096] [--depth 4] [--batch 1024]
"""
import argparse
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import optax

import strategax as sx


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1024)
    args = ap.parse_args()
    strategy = sx.MirroredStrategy()
    n = strategy.num_replicas_in_sync
    device = jax.local_devices()[0]
    print(f"{n} replica(s) on {device.platform} ({device.device_kind}), jax {jax.__version__}")
    rng = np.random.default_rng(0)
    sizes = [args.width] * (args.depth + 1)
    with strategy.scope():
        params = [sx.Variable((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), name=f"w{i}")
                  for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]))]
        optimizer = sx.Optimizer(optax.adam(1e-3))

    def loss_fn(ws, x):
        h = x
        for w in ws:
            h = jax.nn.gelu(h @ w)
        return jnp.mean(h ** 2)

    @strategy.function
    def step(x):
        def replica_fn(x):
            loss, grads = jax.value_and_grad(loss_fn)([p.read_value() for p in params], x)
            optimizer.apply_gradients(zip(grads, params))
            return loss
        return strategy.reduce("MEAN", strategy.run(replica_fn, args=(x,)))

    x = rng.standard_normal((args.batch, args.width)).astype(np.float32)
    batch = next(iter(strategy.experimental_distribute_dataset([x])))
    memory = step.stats(batch).memory
    print(memory)
    before = device.memory_stats()  # None on CPU
    float(step(batch))
    after = device.memory_stats()
    if before and after and "peak_bytes_in_use" in after:
        outside = before["bytes_in_use"] - memory.inputs  # on the device, not the step's
        measured = after["peak_bytes_in_use"] - outside
        print(f"device bytes in use before the step: {before['bytes_in_use']:,}; peak after it: "
              f"{after['peak_bytes_in_use']:,}")
        print(f"measured step peak {measured:,} bytes vs XLA's predicted peak {memory.peak:,} "
              f"({measured / memory.peak:.3f}x); inputs + outputs + temporaries = "
              f"{memory.inputs + memory.outputs + memory.temporaries:,}")
    else:
        print("this device reports no memory statistics: nothing measured")
    with tempfile.TemporaryDirectory() as logdir:
        sx.profile(step, batch, steps=3, logdir=logdir)


if __name__ == "__main__":
    main()

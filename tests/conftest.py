"""Test setup: 8 simulated CPU devices, and a check run after every test that each program it
compiled round-trips through the IR text and runs to the same numbers (also on the
reference interpreter)."""
import atexit
import functools
import inspect
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# every pass manager verifies the module after each pass (passes/manager.py): a pass that
# breaks the module fails at that pass, naming it, in every test
os.environ.setdefault("STRATEGAX_VERIFY", "1")
# The suite runs with the compilation cache on, as users get it, but in a folder of its own
# (never the user's, shared by the worker processes it starts), removed when it ends.
_CACHE = tempfile.mkdtemp(prefix="strategax-test-cache-")
os.environ["STRATEGAX_COMPILATION_CACHE"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import strategax as sx  # noqa: E402
from strategax.trace import function as _function  # noqa: E402

jax.config.update("jax_enable_x64", False)

REFERENCE_OP_LIMIT = 400
if os.environ.get("STRATEGAX_TEST_REFERENCE") == "eager":  # to measure what the NumPy rules save (docs/testing.md)
    from strategax.backends import reference as _reference

    _reference.numpy_reference = lambda op, args, num_replicas: None  # every generic op in eager JAX


def here() -> int:
    """The line number of the caller (the line an error must name)."""
    return inspect.currentframe().f_back.f_lineno


def run_dump(script: Path, out: Path, *options: str) -> subprocess.CompletedProcess:
    """`strategax-dump --out OUT [OPTIONS] SCRIPT` in a fresh process on 4 CPU devices."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent), JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=4")
    env.pop("STRATEGAX_DUMP_TO", None)
    return subprocess.run([sys.executable, "-m", "strategax.tools.strategax_dump", "--out", str(out), *options,
                           str(script)], capture_output=True, text=True, env=env, timeout=300)


def tensor(rec) -> np.ndarray:
    """A tensor recorded from TensorFlow (tests/data/tf/*.json: value, dtype, shape) as NumPy."""
    return np.asarray(rec["value"], dtype=rec["dtype"]).reshape(rec["shape"])


def assert_tensor(got, rec) -> None:
    """`got` has the recorded tensor's shape and values (rtol 1e-6)."""
    want = tensor(rec)
    got = np.asarray(got)
    assert got.shape == want.shape, (got, want)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def assert_names_this_line(err, line: int) -> None:
    """`err` (an exception or pytest's ExceptionInfo) names the calling test file, `line`, and a fix."""
    text = str(getattr(err, "value", err))
    file = os.path.basename(inspect.currentframe().f_back.f_code.co_filename)
    assert f"{file}:{line}:" in text, text
    assert "fix:" in text, text  # the reference interpreter is slow: check smaller programs only


@pytest.fixture(autouse=True)
def ir_round_trip(request):
    """Record the first call of every compiled program; afterwards re-parse its printed IR,
    check it prints identically, and check the parsed module (and the reference interpreter)
    computes the same outputs from the same inputs. A program whose text was checked before in
    this process (a module-scoped reference called again, a case compiling the same step) is
    not checked again: it parses to the same module."""
    if request.node.get_closest_marker("no_round_trip"):
        yield
        return
    records = []
    met: dict = {}  # id -> compiled program met in this test (held, so ids stay its own)
    original = _function._Compiled.__call__

    def recording(self, sig):
        if id(self) in met:
            return original(self, sig)
        met[id(self)] = self
        if self.inputs is not None:
            self.take_inputs(sig)  # taken once per call: which program runs depends on the batches
        executable = self.executable_for(sig)
        key = program_key(self, executable)
        if key in _CHECKED:
            return original(self, sig)
        args = [np.asarray(a) if not isinstance(a, jax.Array) else a for a in self.global_args(sig)]
        # Variable buffers (the last inputs) are donated: record and run on device copies, so
        # the real call below still has them (and no host view pins them against donation).
        first_var = len(args) - getattr(self, "num_vars", 0)
        copies = args[:first_var] + [jnp.array(a, copy=True) for a in args[first_var:]]
        host_args = [jax.device_get(a) for a in args[:first_var]] + [
            np.array(jax.device_get(jnp.array(a, copy=True))) for a in args[first_var:]]
        outs = executable(*copies)
        records.append((self, key, host_args, [np.asarray(o) for o in jax.device_get(outs)], executable.constants))
        return original(self, sig)

    _function._Compiled.__call__ = recording
    try:
        yield
    finally:
        _function._Compiled.__call__ = original
    for compiled, key, args, outs, constants in records:
        if key not in _CHECKED:
            check_round_trip(compiled, key[0], args, outs, constants)
            _CHECKED.add(key)


# The programs checked so far in this process (program_key): a program that prints the same as
# one already checked, on the same devices, parses to the same module, so it is checked once.
_CHECKED: set = set()


def program_key(compiled, executable) -> tuple:
    """A compiled program's printed IR, the devices it runs on and the arguments the call's
    program holds as constants."""
    mesh = compiled.executable.mesh
    return (sx.ir.print_module(compiled.module), tuple(d.id for d in np.asarray(mesh.devices).flat),
            frozenset(executable.constants))


def check_round_trip(compiled, text, args, outs, constants):
    """The parsed IR prints the same text and, compiled as the call's program was (the same
    arguments held as constants: XLA may fold a full loop's masks), gives the same outputs."""
    module = compiled.module
    parsed = sx.ir.parse(text)
    assert sx.ir.print_module(parsed) == text, "printing the parsed IR changed the text"
    sx.ir.verify(parsed)
    executable = sx.backends.Executable(parsed, compiled.executable.mesh, constants=constants)
    again = [np.asarray(o) for o in jax.device_get(executable(*args))]
    for a, b in zip(outs, again):
        np.testing.assert_array_equal(a, b)
    if sum(1 for _ in module.walk()) <= REFERENCE_OP_LIMIT:
        check_against_reference(parsed, compiled.executable, args, outs)


def check_against_reference(module, executable, args, outs):
    n = module.attrs["num_replicas"]
    inputs = []
    for a, layout in zip(args, executable.in_layouts):
        if layout.per_replica:
            pieces = np.split(np.asarray(a), n)
            inputs.append([p.reshape(()) if layout.stacked else p for p in pieces])
        else:
            inputs.append(a)
    ref = sx.backends.run_reference(module, *inputs, num_replicas=n)
    tolerance = interpreter_tolerance(module)
    for out, per_replica, layout in zip(outs, ref, executable.out_layouts):
        if layout.per_replica:
            expect = np.stack(per_replica) if layout.stacked else np.concatenate(per_replica)
        else:
            expect = per_replica[0]
        if out.dtype.kind in "fc":
            out, expect = np.asarray(out, np.float64), np.asarray(expect, np.float64)
            atol = max(tolerance["atol"], tolerance["of_largest"] * float(np.max(np.abs(expect), initial=0.0)))
        else:
            atol = tolerance["atol"]
        np.testing.assert_allclose(out, expect, rtol=tolerance["rtol"], atol=atol)


HALF_FLOATS = {np.dtype(jnp.bfloat16), np.dtype(jnp.float16)}


def interpreter_tolerance(module) -> dict:
    """How close the compiled program and the interpreter must agree. The interpreter runs op by
    op in eager JAX and rounds every bfloat16/float16 result; XLA keeps such intermediates in
    float32 inside a fusion (excess precision). So a program that computes in 16 bits may
    differ by a few roundings of 2**-8 (bfloat16): seen up to 2e-3 relative after a step. A sum
    whose terms cancel (a bias gradient) keeps the absolute error of its largest terms, so an
    element near zero is held to one rounding (2**-8) of the largest element of its array."""
    half = any(getattr(r.type, "dtype", None) in HALF_FLOATS for op in module.walk() for r in op.results)
    return dict(rtol=1e-2, atol=1e-4, of_largest=2.0 ** -8) if half else dict(rtol=2e-5, atol=1e-6, of_largest=0.0)


def pytest_configure(config):
    config.addinivalue_line("markers", "no_round_trip: skip the automatic IR round-trip check")


# The slowest files (10 s or more of wall time on two quiet xdist workers), handed to pytest-xdist's
# workers before the others so the run ends on short files and neither worker waits long for the
# other at the end: those that start worker processes first (they run beside the Ray files, on the
# other xdist worker), then the flax and Keras models, sharded optimizers and the rest, longest
# first. tests/test_schedule.py checks each name is a test file. The order changes only the time.
SLOW_FIRST = ("test_multi_worker.py", "test_keras_multi_worker.py", "test_flax_layers.py", "test_preemption.py",
              "test_multi_worker_hung.py", "test_multi_worker_faults.py", "test_multi_worker_safety.py",
              "test_multi_worker_checkpoint.py", "test_custom_training_example.py", "test_sharded_optimizer.py",
              "test_keras_fit.py", "test_keras_batch_norm.py", "test_keras_callbacks.py", "test_keras_inputs.py",
              "test_sharded_optimizer_state.py", "test_keras_tutorial.py", "test_keras_custom_loop.py",
              "test_variables_tf.py", "test_docs_porting.py", "test_compilation_cache.py", "test_strategax_opt.py",
              "test_padding_analysis.py", "test_ragged_shapes.py", "test_fuse_collectives.py", "test_tf_semantics.py",
              "test_random_and_pooling.py", "test_padding_regions.py", "test_input.py", "test_logical_devices.py")


# Session fixtures whose files go to one xdist worker together: the Ray cluster (one per run), and
# the multi-worker tutorial's first run, which the Ray Train test shares
SHARED = ("ray_cluster", "tutorial_first_run")


@functools.lru_cache(maxsize=None)
def uses_ray(file: str | Path) -> bool:
    """Whether a test file asks for the session's Ray cluster or another SHARED fixture (read once)."""
    path = Path(file)
    path = path if path.is_absolute() else Path(__file__).resolve().parent.parent / path
    return path.suffix == ".py" and path.is_file() and any(name in path.read_text() for name in SHARED)


def file_rank(file: str | Path) -> tuple:
    """Where a test file goes in the run: the Ray files, then SLOW_FIRST's, then the others."""
    name = Path(file).name
    return (0,) if uses_ray(file) else (1, SLOW_FIRST.index(name)) if name in SLOW_FIRST else (2,)


def pytest_collection_modifyitems(config, items):
    """Whole files in file_rank's order (a file's tests keep theirs)."""
    ranks = {path: file_rank(path) for path in {item.path for item in items}}
    items.sort(key=lambda item: ranks[item.path])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist (`-n 2`, pyproject.toml) hands out whole files, so a file's module-scoped
    references compile once; the files that use the Ray cluster go to one worker together, so a
    run starts one cluster (with them the multi-worker tutorial's, whose first run the Ray Train
    test shares). Files go out in the order the workers collected them (file_rank's).
    (xdist's own `--dist loadgroup` marks do not group under pytest 9: xdist renames the test ids
    through an attribute pytest 9 no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    class FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::")[0]
            return "ray" if uses_ray(file) else file

    config.option.loadscopereorder = False
    return FileScheduling(config, log)


@pytest.fixture(scope="session")
def ray_cluster():
    """One small local Ray cluster for the whole session (the parameter-server tests): no
    dashboard, the actors' output kept out of pytest's, tests/ importable in the actors, shut
    down at the end so pytest exits."""
    import ray

    # the actors import the test modules whose functions steps call (cloudpickle ships those by name)
    saved = os.environ.get("PYTHONPATH")
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, saved) if p)
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
                 object_store_memory=100 * 1024 * 1024)
    finally:  # Ray's processes have it; the tests' own subprocesses keep theirs
        os.environ.pop("PYTHONPATH") if saved is None else os.environ.__setitem__("PYTHONPATH", saved)
    try:
        yield ray
    finally:
        from parameter_servers import stop_shared

        stop_shared()
        ray.shutdown()


@pytest.fixture(scope="session")
def tutorial_first_run(tmp_path_factory):
    """The multi-worker tutorial's script (examples/multi_worker_custom_training.py), 2 workers
    under TF_CONFIG on loopback, 2 epochs: (its working directory, each worker's history). Run
    once for the tutorial's test (which restarts it from that directory) and the Ray Train test
    (which compares with it)."""
    from test_multi_worker_tutorial import run_job

    tmp = tmp_path_factory.mktemp("tutorial")
    return tmp, run_job(tmp, "first", 2)

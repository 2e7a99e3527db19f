"""Every parameter JAX puts in a jaxpr is an IR attribute: plain data with a text form that
parses back exactly (shardings, meshes, partition specs, axis types, enums, records, dtypes,
dataclasses), and what has no text form (a callback) is held by reference; no parameter makes
tracing fail, and a primitive of a newer JAX traces, lowers and runs by the generic path."""
import dataclasses
import os
import subprocess
import sys
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.extend import core as jex_core
from jax.interpreters import mlir
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec as P, SingleDeviceSharding

import strategax as sx
from strategax import ir
from strategax.dialects import from_attr, to_attr

N = 8
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def strategy():
    return sx.MirroredStrategy([f"CPU:{i}" for i in range(N)])


def per_replica(s, values):
    return s.experimental_distribute_values_from_function(lambda ctx: values[ctx.replica_id_in_sync_group])


def parse_attr(text: str):
    """One attribute value read back from text (as a module attribute)."""
    module = f"module @m attributes {{a = {text}}} {{\n  func @main() -> () {{\n    return\n  }}\n}}\n"
    return ir.parse(module).attrs["a"]


def test_gradient_through_a_bfloat16_cast_matches_one_device_jax():
    # Intent: issue 24's smallest case: the transpose of convert_element_type carries
    # sharding=NamedSharding(AbstractMesh(()), P(None, None)); it traces, and each replica's
    # gradient equals one-device JAX's, bit for bit.
    s = strategy()
    grad = jax.grad(lambda w: jnp.sum(w.astype(jnp.bfloat16) ** 2).astype(jnp.float32))
    ws = [np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3) * (i + 1) for i in range(N)]
    step = s.function(lambda w: s.run(grad, args=(w,)))
    w = per_replica(s, ws)
    for got, wi in zip(s.experimental_local_results(step(w)), ws):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(jax.jit(grad)(wi)))
    assert "#NamedSharding{mesh = #AbstractMesh{" in step.ir(w)


@dataclasses.dataclass(frozen=True)
class Carry:  # a dataclass parameter, like scan's `ft_in` in JAX 0.11
    names: tuple
    flag: bool


class Pair(NamedTuple):
    first: int
    second: tuple


def jax_params():
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Explicit))
    return {
        "sharding, abstract mesh": NamedSharding(AbstractMesh((), ()), P(None, None)),
        "sharding, named axes": NamedSharding(AbstractMesh((2, 4), ("a", "b"), axis_types=(AxisType.Auto,
                                                                                          AxisType.Manual)),
                                              P(None, ("a", "b"), P.UNCONSTRAINED)),
        "sharding, concrete mesh": NamedSharding(mesh, P("x", "y")),
        "sharding, memory kind": NamedSharding(mesh, P(), memory_kind="device"),
        "mesh": mesh,
        "abstract mesh": mesh.abstract_mesh,
        "partition spec, unreduced": P("x", None, unreduced={"y"}),
        "axis type": AxisType.Manual,
        "single-device sharding": SingleDeviceSharding(jax.devices()[3]),
        "device": jax.devices()[5],
        "gather dimension numbers": lax.GatherDimensionNumbers((0, 1), (), (0,), (), ()),
        "conv dimension numbers": lax.ConvDimensionNumbers((0, 1, 2, 3), (3, 2, 0, 1), (0, 3, 1, 2)),
        "precision": (lax.Precision.HIGHEST, lax.Precision.DEFAULT),
        "dot algorithm": lax.DotAlgorithmPreset.BF16_BF16_F32,
        "dtype": np.dtype(jnp.bfloat16),
        "scalars and nests": (1, -2.5, "s", None, True, [1, (2,)], ()),
        "array": np.arange(6, dtype=np.int8).reshape(2, 3),
        "primitive": lax.add_p,
        "dataclass": Carry(("x",), True),
        "named tuple": Pair(1, (2.0, "z")),
    }


PARAMS = jax_params()


@pytest.mark.parametrize("what", sorted(PARAMS))
def test_jax_parameter_prints_and_parses_back_exactly(what):
    # Intent: the attribute's text reads back to equal data that prints identically, and that
    # data converts back to an equal JAX object (a sharding, a mesh, a spec, an enum...).
    value = PARAMS[what]
    attr = to_attr(value)
    text = ir.format_attr(attr)
    assert "#held" not in text, text
    back = parse_attr(text)
    assert back == attr if not isinstance(attr, np.ndarray) else np.array_equal(back, attr)
    assert ir.format_attr(back) == text
    rebuilt = from_attr(back)
    assert type(rebuilt) is type(value)
    assert np.array_equal(rebuilt, value) if isinstance(value, np.ndarray) else rebuilt == value


KIND_SAMPLES = {
    "none": None, "bool": False, "int": -7, "float": 1e-300, "string": 'a "q"\n', "symbol": ir.SymbolRef("w"),
    "word": np.dtype(np.float16), "tuple": (1,), "list": [(), []], "dense": np.array([1.5, -0.0], np.float32),
    "splat": ir.Splat(np.float32(2.0), (1000, 1000)), "enum": ir.EnumAttr("Precision", "HIGH"),
    "record": ir.Record("my.pkg.Thing", [("a", 1), ("b", ir.Record("Inner", []))]),
    "primitive": ir.PrimitiveRef("ge"), "held": ir.Held(print, "print"),
    "jaxpr": parse_attr("#jaxpr<{^(%a: f32[2]):\n  %b = jax.neg %a : f32[2]\n  yield %b}>"),
}


@pytest.mark.parametrize("kind", [k.name for k in ir.KINDS])
def test_every_attribute_kind_prints_and_parses_back(kind):
    # Intent: the table of attribute kinds is whole: each kind has a sample here, and its text
    # parses back to equal data that prints identically.
    assert set(KIND_SAMPLES) == {k.name for k in ir.KINDS}
    value = KIND_SAMPLES[kind]
    text = ir.format_attr(value)
    back = parse_attr(text)
    assert ir.format_attr(back) == text
    if isinstance(value, np.ndarray):
        np.testing.assert_array_equal(back, value)
    elif isinstance(value, ir.Subprogram):  # a block of ops: equal by identity, so by its text
        assert type(back) is ir.Subprogram and [op.name for op in back.block.ops] == ["jax.neg"]
    else:
        assert back == value and type(back) is type(value)


def test_a_held_callback_is_named_and_only_another_process_cannot_read_it():
    # Intent: a Python callback is printed as a placeholder naming it; this process reads the
    # text back to the same object; another process gets a ParseError at its line and column.
    def my_callback(x):
        return x

    held = to_attr(my_callback)  # as an op of a module holds it
    text = ir.format_attr(held)
    assert text.startswith('#held<"test_a_held_callback_is_named_and_only_another_process_cannot_read_it.'
                           '<locals>.my_callback#')
    assert from_attr(parse_attr(text)) is my_callback
    module = f"module @m attributes {{a = {text}}} {{\n  func @main() -> () {{\n    return\n  }}\n}}\n"
    code = "import sys; from strategax import ir; ir.parse(sys.stdin.read(), 'held.sxir')"
    run = subprocess.run([sys.executable, "-c", code], input=module, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, timeout=120)
    assert run.returncode == 1
    assert "ParseError: held.sxir:1:27:" in run.stderr and "only the process that printed" in run.stderr


def test_callbacks_and_a_jaxpr_parameter_trace_lower_and_run():
    # Intent: parameters without text (pure_callback's function, reduce's combiner and its
    # jaxpr, debug.print's tree) no longer stop tracing; results equal one-device JAX (the
    # combiner is not inlined as if it were a call: that gave a wrong answer silently).
    s = strategy()

    def replica_fn(x):
        jax.debug.print("replica input {}", x)
        y = jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return y, lax.reduce(x, 0.0, lambda a, b: jnp.maximum(a, b) + 0.5, (0,))

    xs = [np.array([i, -1.0, 2.0 * i], np.float32) for i in range(N)]
    f = s.function(lambda x: s.run(replica_fn, args=(x,)))
    y, r = f(per_replica(s, xs))
    for yi, ri, xi in zip(s.experimental_local_results(y), s.experimental_local_results(r), xs):
        ey, er = jax.jit(replica_fn)(xi)
        np.testing.assert_allclose(yi, ey, rtol=1e-6)
        np.testing.assert_array_equal(ri, er)


def test_jaxpr_parameters_are_sub_programs_that_print_parse_and_lower():
    # Intent: custom_linear_solve's four jaxprs are `#jaxpr<{...}>` attributes, blocks of ops
    # with a text that reads back; the solve equals one-device JAX on every replica.
    s = strategy()

    def replica_fn(b):
        diag = jnp.array([2.0, 3.0, 4.0])
        return lax.custom_linear_solve(lambda x: diag * x, b, lambda mv, y: y / diag, symmetric=True)

    bs = [np.array([1.0, i, -2.0], np.float32) for i in range(N)]
    f = s.function(lambda b: s.run(replica_fn, args=(b,)))
    b = per_replica(s, bs)
    for got, bi in zip(s.experimental_local_results(f(b)), bs):
        np.testing.assert_allclose(got, jax.jit(replica_fn)(bi), rtol=1e-6)
    text = f.ir(b)
    assert text.count("#jaxpr<{") == 4 and "#held" not in text
    assert ir.print_module(ir.parse(text)) == text


# --- a primitive of a newer JAX: a new name, a parameter of a class no JAX knows -------------
@dataclasses.dataclass(frozen=True)
class Affine:
    scale: float
    shift: tuple


class Offset:  # an arbitrary object: no fields to print
    def __init__(self, k):
        self.k = k


def _affine(x, *, how, extra):
    return x * how.scale + how.shift[0] + extra.k


affine_p = jex_core.Primitive("test_new_affine")
affine_p.def_impl(_affine)
affine_p.def_abstract_eval(lambda x, **params: jax.core.ShapedArray(x.shape, x.dtype))
mlir.register_lowering(affine_p, mlir.lower_fun(_affine, multiple_results=False))


def test_a_new_primitive_with_new_parameter_classes_traces_lowers_and_runs():
    # Intent: the next JAX: a primitive strategax never heard of, carrying a frozen dataclass
    # and an arbitrary object, takes the generic path and equals plain JAX on every replica.
    s = strategy()
    how, extra = Affine(2.0, (0.5,)), Offset(3.0)

    def replica_fn(x):
        return affine_p.bind(jnp.sin(x), how=how, extra=extra)

    xs = [np.full((2, 2), i, np.float32) for i in range(N)]
    f = s.function(lambda x: s.run(replica_fn, args=(x,)))
    x = per_replica(s, xs)
    for got, xi in zip(s.experimental_local_results(f(x)), xs):
        np.testing.assert_array_equal(got, jax.jit(replica_fn)(xi))
    text = f.ir(x)
    assert "jax.test_new_affine" in text and "how = #Affine{scale = 2.0, shift = (0.5,)}" in text
    assert 'extra = #held<"Offset#' in text

"""The IR text format: printer and parser are exact inverses; bad text gives a ParseError
with line and column; the verifier rejects malformed modules."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax import lax

from strategax import ir
from strategax.dialects import from_attr

EVERY_KIND = '''module @kinds attributes {num_replicas = 4, note = "a \\"quoted\\" \\n line"} {
  var @w : f32[2,3] {sync = "on_write", agg = "none"}
  func @main(%x: f32[2,3] per_replica, %i: i32[1] mirrored) -> (f32[2,3] mirrored, f32[] per_replica) {
    %c = sx.constant {value = dense<f32[2,3]: 1.0, -2.5, 1e-08, inf, -inf, 3.0>} : f32[2,3] mirrored
    %z = sx.constant {value = dense<bf16[4]: splat 0.0>} : bf16[4] mirrored
    %b = sx.constant {value = dense<bool[2]: true, false>} : bool[2] mirrored
    %a = jax.add %x, %c : f32[2,3] per_replica loc("train.py":18)
    %d = jax.dot_general %a, %c {dimension_numbers = (((1,), (1,)), ((), ())), precision = (#Precision.HIGHEST, #Precision.DEFAULT), preferred_element_type = f32, out_sharding = none} : f32[2,2] per_replica
    %g = jax.gather %x, %i {dimension_numbers = #GatherDimensionNumbers{offset_dims = (0, 1), collapsed_slice_dims = (), start_index_map = (0,), operand_batching_dims = (), start_indices_batching_dims = ()}, slice_sizes = [1, 3], unique_indices = false, indices_are_sorted = false, mode = #GatherScatterMode.CLIP, fill_value = none} : f32[1,3] per_replica
    %r = sx.all_reduce %a {op = "mean", reason = "ReplicaContext.all_reduce"} : f32[2,3] mirrored loc("/abs/path with space/t.py":7)
    %s = jax.reduce_sum %a {axes = (0, 1)} : f32[] per_replica
    return %r, %s
  }
}
'''  # noqa: E501  IR text: one op a line, as the printer writes it


def test_every_attribute_kind_round_trips():
    # Intent: ints, floats (inf, tiny), strings with escapes, dtypes, enums, records, lists,
    # tuples, dense and splat arrays, symbols and locations print back identically.
    m = ir.parse(EVERY_KIND)
    assert ir.print_module(m) == EVERY_KIND
    ir.verify(m)
    const = m.main.body.ops[0].attrs["value"]
    np.testing.assert_array_equal(const, np.array([[1.0, -2.5, 1e-8], [np.inf, -np.inf, 3.0]], np.float32))
    precision = m.main.body.ops[4].attrs["precision"]  # plain data, and JAX's enum when bound
    assert precision == (ir.EnumAttr("Precision", "HIGHEST"), ir.EnumAttr("Precision", "DEFAULT"))
    assert from_attr(precision) == (lax.Precision.HIGHEST, lax.Precision.DEFAULT)
    assert m.attrs["note"] == 'a "quoted" \n line'


def test_comments_are_ignored_and_names_kept():
    text = EVERY_KIND.replace("  var @w", "  // a comment line\n  var @w")
    assert ir.print_module(ir.parse(text)) == EVERY_KIND


@pytest.mark.parametrize("bad, line, col, message", [
    ("module @m {\n  func @f() -> () {\n    return %x\n  }\n}\n", 3, 12, "undefined value %x"),
    ("module @m {\n  func @f() -> () {\n    %a = jax.nope : f32[]\n    return\n  }\n}\n", 3, 10, "unknown op"),
    ("module @m {\n  func @f() -> (f32[]) {\n    %a = sx.constant {value = dense<f32[2]: 1.0>} : f32[]\n"
     "    return %a\n  }\n}\n",
     3, 37, "needs 2 values"),
    ("module @m {\n  func @f() -> () {\n    %a = sx.replica_id : i32[]\n    %a = sx.replica_id : i32[]\n"
     "    return\n  }\n}\n",
     4, 5, "defined twice"),
    ("module @m {\n  func @f() -> () {\n    %a = sx.all_reduce : f32[]\n"
     "    return\n  }\n}\n", 3, 5, "expects 1 operands"),
    ("module @m {\n  func @f() -> () {\n    %a = sx.replica_id : q32[]\n    return\n  }\n}\n", 3, 26, "unknown dtype"),
    ("module @m {\n  func @f() -> () {\n    return\n  }\n", 5, 1, "end of input"),
    ("module @m { $ }", 1, 13, "unexpected character"),
    # declared attributes: a misspelt enum names the attribute and its allowed values
    ('module @m {\n  var @w : f32[] mirrored {sync = "on_write", agg = "summ"}\n  func @f() -> () {\n'
     '    return\n  }\n}\n',
     2, 53, 'attribute `agg` is "summ"; allowed values: "none", "sum", "mean", "only_first_replica"'),
    ('module @m {\n  func @f(%x: f32[] per_replica) -> () {\n'
     '    %a = sx.all_reduce %x {op = "summ", reason = "r"} : f32[] mirrored\n'
     '    return\n  }\n}\n',
     3, 33, 'attribute `op` is "summ"; allowed values: "sum", "mean", "max", "min"'),
    ('module @m {\n  func @f(%x: f32[] per_replica) -> () {\n'
     '    %a = sx.all_reduce %x {op = "sum", reason = 3} : f32[] mirrored\n'
     '    return\n  }\n}\n',
     3, 49, "attribute `reason` must be a string, not 3"),
    ('module @m {\n  func @f(%x: f32[] per_replica) -> () {\n'
     '    %a = sx.all_reduce %x {op = "sum", reason = "r", pack = 3} : f32[] mirrored\n'
     '    return\n  }\n}\n',
     3, 61, "unknown attribute `pack`"),
    ('module @m {\n  func @f(%x: f32[] per_replica) -> () {\n    %a = sx.all_reduce %x {op = "sum"} : f32[] mirrored\n'
     '    return\n  }\n}\n',
     3, 5, "missing attribute reason"),
    ('module @m attributes {num_replicas = 0} {\n  func @f() -> () {\n    return\n  }\n}\n',
     1, 38, "attribute `num_replicas` must be >= 1"),
])
def test_parse_errors_point_at_line_and_column(bad, line, col, message):
    with pytest.raises(ir.ParseError) as err:
        ir.parse(bad, "bad.sxir")
    e = err.value
    assert (e.line, e.col) == (line, col), str(e)
    assert message in e.message
    assert str(e).startswith(f"bad.sxir:{line}:{col}: ")
    assert str(e).splitlines()[-1] == " " * (col - 1) + "^"
    assert isinstance(e, ValueError)


def test_verifier_reports_bad_op_with_ir_excerpt():
    m = ir.parse(EVERY_KIND)
    m.main.body.ops[6].attrs["op"] = "median"  # the all_reduce
    with pytest.raises(ir.VerifyError) as err:
        ir.verify(m)
    text = str(err.value)
    assert "sx.all_reduce" in text and "median" in text and "^^^" in text and "t.py:7" in text


def test_parser_never_evaluates_code():
    # Intent: attribute text that looks like Python is rejected, not run.
    text = EVERY_KIND.replace('op = "mean"', 'op = __import__("os").system("false")')
    with pytest.raises(ir.ParseError):
        ir.parse(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("module@func%(){}[]<>:=,^#.\"\\ \n-0123456789abcdefijklnoprstuxyz_")),
               max_size=200))
def test_garbage_raises_parse_error_only(text):
    try:
        ir.parse(text)
    except ir.ParseError as e:
        assert e.line >= 1 and e.col >= 1


@settings(max_examples=100, deadline=None)
@given(st.integers(0, len(EVERY_KIND.rstrip()) - 2))
def test_truncated_modules_raise_parse_error(cut):
    # Intent: a module cut short (its closing brace lost) is a ParseError located inside the text.
    with pytest.raises(ir.ParseError) as info:
        ir.parse(EVERY_KIND[:cut])
    assert 1 <= info.value.line <= EVERY_KIND[:cut].count("\n") + 1


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(EVERY_KIND) - 1), st.integers(1, 5))
def test_damaged_modules_raise_parse_error_or_stay_valid(cut, width):
    # Intent: deleting a few characters anywhere gives a located ParseError, or (when the text
    # happens to stay well formed) a module that verifies and prints back to itself.
    damaged = EVERY_KIND[:cut] + EVERY_KIND[cut + width:]
    try:
        module = ir.parse(damaged)
    except ir.ParseError as e:
        assert e.line >= 1 and e.col >= 1
        return
    ir.verify(module)
    assert ir.print_module(ir.parse(ir.print_module(module))) == ir.print_module(module)

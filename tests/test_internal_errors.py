"""No bare internal error reaches a user (issue 35): an exception from inside strategax that is
not one of its named errors — from a pass, the import of the traced program, the lowering or a
compiled call — is an `sx.InternalError` naming the stage, the op and the user's line, with the
original as its cause and a line saying how to report it; the user's own exceptions stay
theirs; with STRATEGAX_VERIFY=1 (the suite sets it) a pass that leaves a broken module is named
by the verifier right after it. The bugs are planted with monkeypatch: each test's expected
message is written from the planted fault, not read back from strategax."""
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import here

import strategax as sx
from strategax import dialects, ir
from strategax.passes import canonicalize, manager, simplify_collectives
from strategax.trace import compiled, function

N = 2


@pytest.fixture(scope="module")
def strategy():
    return sx.MirroredStrategy([f"CPU:{i}" for i in range(N)])


def _values(strategy):
    return strategy.experimental_distribute_values_from_function(
        lambda c: np.arange(3, dtype=np.float32) + c.replica_id_in_sync_group)


def _assert_internal(info, stage: str, line: int, op: str | None, cause: type):
    err = info.value
    text = str(err)
    where = f"test_internal_errors.py:{line}: internal error in {stage}"
    assert where in text.splitlines()[0], text
    assert (f" at {op}" in text) if op else (" at " not in text.splitlines()[0].split(": ", 2)[1]), text
    assert "fix: this is a bug in strategax, not in your program: please report it" in text, text
    assert type(err.__cause__) is cause and err.file.endswith("test_internal_errors.py") and err.line == line
    assert isinstance(err, RuntimeError) and isinstance(err, sx.StrategaxError)


@pytest.mark.no_round_trip
def test_a_pass_raising_keyerror_is_an_internal_error(strategy, monkeypatch):
    def broken(rw, n):
        for op in rw.ops():
            if op.name == "sx.all_reduce":
                raise KeyError(12345)
    monkeypatch.setattr(simplify_collectives, "simplify_block", broken)
    x = _values(strategy)
    step = strategy.function(lambda x: strategy.run(
        lambda v: sx.get_replica_context().all_reduce("SUM", v * 2.0), args=(x,)))  # the op's line
    line = here() - 1
    with pytest.raises(sx.InternalError) as info:
        step(x)
    _assert_internal(info, "pass 'simplify-collectives'", line, "sx.all_reduce", KeyError)
    assert "passes before it: canonicalize, dce, mask-padding" in str(info.value)


@pytest.mark.no_round_trip
def test_a_lowering_rule_raising_indexerror_is_an_internal_error(strategy, monkeypatch):
    def broken(op, args, ctx):
        return [args[5]]
    monkeypatch.setitem(dialects.LOWERINGS, "jax.sin", broken)
    x = _values(strategy)
    step = strategy.function(lambda x: strategy.run(lambda v: jnp.sin(v) + 1.0, args=(x,)))
    line = here() - 1
    with pytest.raises(sx.InternalError) as info:
        step(x)
    _assert_internal(info, "the lowering to JAX", line, "jax.sin", IndexError)


@pytest.mark.no_round_trip
def test_the_import_raising_is_an_internal_error(strategy, monkeypatch):
    def broken(closed, types, name):
        raise AssertionError("planted")
    monkeypatch.setattr(function, "import_jaxpr", broken)
    x = _values(strategy)
    step = strategy.function(lambda x: strategy.run(lambda v: v + 1.0, args=(x,)))
    with pytest.raises(sx.InternalError) as info:
        step(x)
    _assert_internal(info, "the import of the traced program into the IR", here() - 1, None, AssertionError)


@pytest.mark.no_round_trip
def test_a_compiled_call_raising_is_an_internal_error(strategy, monkeypatch):
    def broken(array, layout):
        raise AttributeError("planted")
    monkeypatch.setattr(compiled.Mirrored, "from_global", staticmethod(broken))
    x = _values(strategy)
    step = strategy.function(lambda x: strategy.run(
        lambda v: sx.get_replica_context().all_reduce("SUM", v), args=(x,)))
    with pytest.raises(sx.InternalError) as info:
        step(x)
    _assert_internal(info, "a compiled call", here() - 1, None, AttributeError)


@pytest.mark.parametrize("kind", [KeyError, AssertionError, IndexError])
def test_the_users_own_exceptions_are_not_wrapped(strategy, kind):
    # the user's function raising inside a replica function, traced by strategax: theirs, as is
    def rf(v):
        raise kind("mine")
    x = _values(strategy)
    with pytest.raises(kind) as info:
        strategy.function(lambda x: strategy.run(rf, args=(x,)))(x)
    assert not isinstance(info.value, sx.InternalError) and "mine" in str(info.value)
    with pytest.raises(kind):
        strategy.run(rf, args=(x,))


@pytest.mark.no_round_trip
def test_the_verifier_names_the_pass_that_broke_the_module(strategy, monkeypatch):
    # a pass that drops the op defining a value still read, without going through the rewriter:
    # with STRATEGAX_VERIFY=1 the verifier after that pass names it, the reader and its line
    def broken(self, module):
        body = module.main.body
        body.ops[:] = [op for op in body.ops if op.name != "jax.sin"]
        return True
    monkeypatch.setattr(canonicalize.Canonicalize, "apply", broken)
    x = _values(strategy)
    step = strategy.function(lambda x: strategy.run(lambda v: jnp.cos(jnp.sin(v)), args=(x,)))
    line = here() - 1
    with pytest.raises(manager.PassFailure) as info:
        step(x)
    # a pass's own bug, so an sx.InternalError (API.md), its cause the verifier's error
    _assert_internal(info, "pass 'canonicalize' (passes before it: none)", line, "jax.cos", ir.VerifyError)
    text = str(info.value)
    assert ": the module it left does not verify: jax.cos: operand" in text.splitlines()[0], text
    assert "is used before it is defined (or comes from outside the region) (from " in text, text
    assert f"test_internal_errors.py:{line})" in text, text
    # without the verifier the broken module fails later, in the lowering: an InternalError, not a KeyError
    monkeypatch.setenv("STRATEGAX_VERIFY", "0")
    step = strategy.function(lambda x: strategy.run(lambda v: jnp.cos(jnp.sin(v)), args=(x,)))
    line = here() - 1
    with pytest.raises(sx.InternalError) as info:
        step(x)
    _assert_internal(info, "the lowering to JAX", line, "jax.cos", KeyError)

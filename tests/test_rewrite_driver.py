"""The rewrite driver (passes/rewrite.py) and the pass manager's requirement check."""
from __future__ import annotations

import numpy as np
import pytest

import strategax as sx
from strategax import ir
from strategax.ir import Locality, Operation, TensorType, Value
from strategax.passes import PassManager, PassOrderError, get_pass, parse_pipeline
from strategax.passes.rewrite import BlockRewriter, rewrite_blocks

F32 = TensorType((3,), np.dtype("float32"), Locality.PER_REPLICA)


def _op(name, operands, n_results=1, **attrs):
    return Operation(name, list(operands), [Value(F32, f"{name[4:]}") for _ in range(n_results)], attrs)


def _block():
    x = Value(F32, "x")
    a = _op("jax.neg", [x])
    b = _op("jax.exp", [a.result])
    c = _op("jax.add", [a.result, b.result])
    return ir.Block([x], [a, b, c], [c.result]), x, a, b, c


def test_replace_redirects_later_operands_and_block_results():
    # Intent: after replace(b, [x]) every reader of b's result reads x, b is gone, and commit
    # reports the change; the users/producers facts describe the block as it was given.
    block, x, a, b, c = _block()
    rw = BlockRewriter(block)
    assert rw.users(a.result) == [b, c] and rw.producer(b.result) is b and rw.num_uses(c.result) == 1
    for op in rw.ops():
        if op is b:
            rw.replace(b, [x])
    assert rw.commit() is True
    assert block.ops == [a, c] and c.operands == [a.result, x]


def test_chains_resolve_and_except_in_keeps_the_old_value():
    # Intent: a -> b -> c replacements resolve to their end; `except_in` leaves one reader alone
    # (a collective inserted after a read keeps reading it while everything else reads the sum).
    block, x, a, b, c = _block()
    rw = BlockRewriter(block)
    total = _op("sx.all_reduce", [a.result], op="sum", reason="test")
    rw.insert_after(a, [total])
    rw.replace_uses(a.result, total.result, except_in=[total])
    assert rw.commit()
    assert block.ops == [a, total, b, c]
    assert total.operands == [a.result] and b.operands == [total.result] and c.operands[0] is total.result


def test_insert_before_erase_and_nothing_changed():
    # Intent: inserted ops land where asked (before an inserted op too); an untouched block
    # commits as unchanged and keeps its ops.
    block, x, a, b, c = _block()
    assert BlockRewriter(block).commit() is False and block.ops == [a, b, c]
    rw = BlockRewriter(block)
    n1 = _op("jax.abs", [x])
    n2 = _op("jax.sin", [x])
    rw.insert_before(b, [n1])
    rw.insert_before(n1, [n2])
    rw.set_operand(b, 0, n1.result)
    rw.erase(c)
    block.results = [b.result]
    assert rw.commit()
    assert block.ops == [a, n2, n1, b] and b.operands == [n1.result]


def test_reorder_puts_definitions_before_uses():
    # Intent: an op that moved before the value it reads is placed after it by commit's sort.
    block, x, a, b, c = _block()
    rw = BlockRewriter(block)
    d = _op("jax.neg", [c.result])
    rw.insert_before(a, [d])
    rw.reorder()
    block.results = [d.result]
    rw.commit()
    assert block.ops.index(d) > block.ops.index(c)


def test_the_sort_is_networkx_lexicographic_order_and_keeps_effects_in_order():
    # Intent: the heap sort (no networkx on a first call) gives networkx's
    # lexicographical_topological_sort of the dependency graph (of the ready ops, the earliest
    # first) on shuffled blocks with variable reads and writes, whose relative order stays.
    import random

    import networkx as nx

    from strategax.passes.rewrite import dependency_graph, topological_sort

    rng, cycles = random.Random(0), 0
    for trial in range(40):
        x = Value(F32, "x")
        ops, values = [], [x]
        for k in range(14):
            kind = rng.random()
            if kind < 0.2:
                ops.append(Operation("sx.var_read", [], [Value(F32, f"r{k}")], {}))
            elif kind < 0.35:
                ops.append(Operation("sx.var_assign", [rng.choice(values)], [], {}))
            else:
                ops.append(_op(rng.choice(["jax.neg", "jax.add"]), rng.sample(values, min(len(values), 2))[:1]
                               + ([rng.choice(values)] if rng.random() < 0.5 else [])))
            values += ops[-1].results
        rng.shuffle(ops)
        block = ir.Block([x], list(ops), [values[-1]])
        try:
            want = [ops[i] for i in nx.lexicographical_topological_sort(dependency_graph(block))]
        except nx.NetworkXUnfeasible:  # the shuffled effects' order contradicts their data flow
            with pytest.raises(RuntimeError, match="dependency cycle"):
                topological_sort(block)
            cycles += 1
            continue
        effects = [op for op in ops if op.name.startswith("sx.var")]
        assert topological_sort(block) == (want != ops), trial
        assert block.ops == want, trial
        assert [op for op in block.ops if op.name.startswith("sx.var")] == effects
    assert 0 < cycles < 40  # both kinds of block were met


def test_a_dependency_cycle_is_an_internal_error_naming_its_ops():
    # Intent: ops that read each other's results cannot be ordered: RuntimeError naming them.
    from strategax.passes.rewrite import topological_sort

    x = Value(F32, "x")
    a = _op("jax.neg", [x])
    b = _op("jax.exp", [a.result])
    a.operands = [b.result]
    with pytest.raises(RuntimeError, match=r"dependency cycle: jax\.(neg|exp) \(op \d\) -> jax\.(neg|exp)"):
        topological_sort(ir.Block([x], [a, b], [b.result]))


SIMPLIFY = """module @m attributes {num_replicas = 2} {
  func @main(%x: f32[3]) -> (f32[3]) {
    %r = sx.all_reduce %x {op = "mean", reason = "r"} : f32[3]
    return %r
  }
}
"""


def test_a_pass_before_its_requirement_is_refused():
    # Intent: simplify-collectives reads localities; before infer-locality in one pipeline, or on
    # a module whose values carry no localities, the manager refuses, naming both passes.
    with pytest.raises(PassOrderError, match="'simplify-collectives' reads what 'infer-locality' computes"):
        PassManager(parse_pipeline("simplify-collectives,infer-locality")).run(ir.parse(SIMPLIFY))
    with pytest.raises(PassOrderError, match="add 'infer-locality' before 'simplify-collectives'"):
        PassManager(parse_pipeline("simplify-collectives")).run(ir.parse(SIMPLIFY))
    pm = PassManager(parse_pipeline("infer-locality,simplify-collectives"))
    out = pm.run(ir.parse(SIMPLIFY))
    assert pm.changed == {"infer-locality": True, "simplify-collectives": False}  # %x is per-replica
    assert "sx.all_reduce" in str(out)


def test_apply_says_whether_it_changed_anything():
    # Intent: a pass's apply returns True exactly when it changed the module (a second cse finds
    # nothing left to merge).
    text = """module @m attributes {num_replicas = 2} {
  func @main(%x: f32[3] per_replica) -> (f32[3] per_replica) {
    %a = jax.neg %x : f32[3] per_replica
    %b = jax.neg %x : f32[3] per_replica
    %c = jax.add %a, %b : f32[3] per_replica
    return %c
  }
}
"""
    module = ir.parse(text)
    cse = get_pass("cse")
    assert cse.apply(module) is True
    assert cse.apply(module) is False
    assert str(module).count("jax.neg") == 1


def test_an_undeclared_op_is_a_named_error():
    # Intent: an op no dialect declares (built in Python, never verified) reaching a pass that
    # needs its declaration is an UndeclaredOpError naming the op and its line, not an
    # AttributeError on None.
    x = Value(F32, "x")
    op = Operation("foo.bar", [x], [Value(F32, "y")], loc=ir.Location("train.py", 7))
    module = ir.Module("m", {"num_replicas": 2}, funcs=[ir.Func("main", ir.Block([x], [op], [op.result]))])
    with pytest.raises(ir.UndeclaredOpError, match=r"op 'foo.bar' at train.py:7 is declared by no dialect"):
        get_pass("infer-locality").apply(module)


def test_the_tools_run_under_python_OO():
    # Intent: `python -OO` strips docstrings; the command-line tools' help does not read them.
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # both at once: each starts by compiling every module it imports (no -OO .pyc yet)
    procs = [subprocess.Popen([sys.executable, "-OO", "-m", f"strategax.tools.{tool}", "--help"], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": root})
             for tool in ("strategax_opt", "strategax_dump")]
    try:
        outs = [proc.communicate(timeout=120) for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    for proc, (stdout, stderr) in zip(procs, outs):
        assert proc.returncode == 0 and "usage:" in stdout, stderr


def test_commit_refuses_to_erase_an_op_whose_result_is_still_read():
    # Intent: as xDSL's erase_op(safe_erase=True): erasing an op whose result a kept op reads,
    # or the block yields, is refused at commit, naming the erased op and its reader; the
    # block is left as it was.
    block, x, a, b, c = _block()
    rw = BlockRewriter(block)
    rw.erase(b)  # c still reads b's result
    with pytest.raises(RuntimeError, match=r"erased jax.exp \(%exp\), but jax.add \(%add\) still reads its "
                       r"result %exp"):
        rw.commit()
    assert block.ops == [a, b, c]
    rw = BlockRewriter(block)
    rw.erase(c)  # the block yields c's result
    with pytest.raises(RuntimeError, match=r"erased jax.add \(%add\), but the block still yields its result %add"):
        rw.commit()
    rw = BlockRewriter(block)
    rw.replace(b, [x])  # a replaced op's readers read the replacement: allowed
    assert rw.commit() and block.ops == [a, c]


def test_a_pass_that_erases_a_read_op_is_an_internal_error_naming_it(monkeypatch):
    # Intent: through the pass manager the refusal is an sx.InternalError naming the pass, the
    # passes before it, the op and the op's user line, with the rewriter's error as its cause.
    from strategax.passes import dce
    module = ir.parse('''module @m {
  func @main(%x: f32[3] per_replica) -> (f32[3] per_replica) {
    %a = jax.neg %x : f32[3] per_replica loc("train.py":7)
    return %a
  }
}''')

    def erase_all(rw):
        for op in rw.ops():
            rw.erase(op)
    monkeypatch.setattr(dce.DeadCodeElimination, "apply", lambda self, m: rewrite_blocks(m, erase_all))
    with pytest.raises(sx.InternalError) as info:
        PassManager([get_pass("canonicalize"), get_pass("dce")]).run(module)
    text = str(info.value)
    assert text.startswith("train.py:7: internal error in pass 'dce' (passes before it: canonicalize) at jax.neg"), text
    assert "but the block still yields its result %a" in text and "please report it" in text, text
    assert isinstance(info.value.__cause__, RuntimeError) and info.value.op is module.main.body.ops[0]

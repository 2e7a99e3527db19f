"""Modules meet through public faces (as tests/test_layers.py checks their imports): no module
but trace/distributed_values.py reads a distributed value's private fields, and no module asks
what an object is by probing for an `_is_...` attribute (strategax._markers says it)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "strategax"
OWNER = ROOT / "trace" / "distributed_values.py"

# DistributedValues' (and PerReplicaBatch's) private fields and methods, read through another
# name than `self`
PRIVATE = re.compile(r"(?<!\bself)\.(_global|_values|_local|_counts|_rows|_count_value|_identical|_held_components"
                     r"|_layout|_keep_global|_num_components|_ndim|_from_global|_from_global_batch|_traced)\b")
PROBE = re.compile(r"""getattr\([^()]*,\s*["']_is_""")


def _hits(pattern: re.Pattern, skip: Path | None = None) -> list[str]:
    """`file:line: text` of each line matching `pattern` in strategax, but in `skip` (a module, or
    a package's folder: its modules)."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        if skip is not None and (path == skip or skip in path.parents):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                out.append(f"{path.relative_to(ROOT.parent)}:{n}: {line.strip()}")
    return out


def test_no_module_reads_a_distributed_values_private_field():
    assert PRIVATE.search("x._global[0]") and PRIVATE.search("v._counts") and not PRIVATE.search("self._values")
    hits = _hits(PRIVATE, skip=OWNER)
    assert not hits, "use DistributedValues' accessors (held_global, global_array, layout, tracer, " \
                     "held_components(), real_counts, ...):\n" + "\n".join(hits)


def test_no_attribute_probe_stands_in_for_a_type_test():
    assert PROBE.search('getattr(x, "_is_variable", False)')
    hits = _hits(PROBE)
    assert not hits, "use strategax._markers (is_variable, is_distributed_input, ...):\n" + "\n".join(hits)


LAYOUT_HOLDER = ROOT / "dialects" / "control_flow"  # the package: its ops, operands, verify, flows
LAYOUT_ATTRS = re.compile(r"""["'](num_consts|num_carry|cond_nconsts|body_nconsts)["']""")
LOOP_OPS = re.compile(r"""["']jax\.(scan|while|cond)["']""")
OPERAND_INDEX = re.compile(r"\.operands\s*\[")


def test_only_operand_groups_knows_a_loop_ops_operand_layout():
    # Intent: consts / carry / xs are cut in one place (control_flow.operand_groups): no other
    # module reads the layout attributes, nor indexes the operands of a module naming a loop op.
    assert LAYOUT_ATTRS.search('op.attrs["num_carry"]') and OPERAND_INDEX.search("op.operands[nc:]")
    hits = _hits(LAYOUT_ATTRS, skip=LAYOUT_HOLDER)
    for path in sorted(ROOT.rglob("*.py")):
        text = path.read_text()
        if LAYOUT_HOLDER not in path.parents and LOOP_OPS.search(text):
            hits += [f"{path.relative_to(ROOT.parent)}:{n}: {line.strip()}"
                     for n, line in enumerate(text.splitlines(), 1) if OPERAND_INDEX.search(line)]
    assert not hits, "cut a jax.scan / jax.while / jax.cond's operands with control_flow.operand_groups:\n" \
                     + "\n".join(hits)

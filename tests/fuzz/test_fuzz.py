"""Differential fuzzing of the whole compiler (issue 35) on a small, derandomized budget:
random replica programs (tests/fuzz/programs.py) compiled by strategax against the same
computation in NumPy and one-device JAX, and the IR they trace to through strategax-opt with
every pass and pipeline against the reference interpreter (tests/fuzz/ir_modules.py); every
regression the long runs (tools/fuzz.py) found. Set STRATEGAX_FUZZ_PROGRAMS to fuzz longer."""
from __future__ import annotations

import dataclasses
import os

import pytest
from hypothesis import Phase, given, settings, strategies as st

from .ir_modules import check_ir
from .programs import ALL_HEALTH_CHECKS, TRANSPOSE_KINDS, Program, check, programs
from .regressions import ILL_CONDITIONED, RAISING, REGRESSIONS

PROGRAMS = int(os.environ.get("STRATEGAX_FUZZ_PROGRAMS", "24"))
IR_MODULES = int(os.environ.get("STRATEGAX_FUZZ_IR", "10"))
TRANSPOSES = int(os.environ.get("STRATEGAX_FUZZ_TRANSPOSES", "8"))


def budget(examples: int) -> settings:
    # against a mutant (tools/fuzz.py --mutants) only whether it is caught counts: no shrinking
    phases = [Phase.explicit, Phase.generate] if os.environ.get("STRATEGAX_FUZZ_MUTANT") else list(Phase)
    return settings(max_examples=examples, deadline=None, derandomize=True, suppress_health_check=ALL_HEALTH_CHECKS,
                    phases=phases)


@pytest.mark.no_round_trip  # each program is checked against its own references here
@budget(PROGRAMS)
@given(programs())
def test_random_programs_agree_with_numpy_and_jax(p: Program):
    # Intent: the same numbers per replica as NumPy/one-device JAX (TensorFlow's rules for the
    # collectives and variables), or a named strategax error; never another exception.
    check(p)


@pytest.mark.no_round_trip
@budget(TRANSPOSES)
@given(programs(max_steps=5, kinds=TRANSPOSE_KINDS))
def test_random_programs_of_transposes_and_their_collectives_agree_with_numpy(p: Program):
    # Intent: transposes (chains of them, 3-D values), all_reduces of transposes and weight
    # gradients (jax.grad's transpose(dot_general)), which simplify-collectives sinks below the
    # all_reduce, give NumPy's numbers per replica, or a named error where TensorFlow raises.
    check(p)


@pytest.mark.no_round_trip
@budget(IR_MODULES)
@given(programs(max_steps=5), st.lists(st.integers(0, 30), max_size=4))
def test_every_pass_keeps_the_reference_interpreters_numbers(p: Program, order: list[int]):
    # Intent: strategax-opt with every pass and pipeline (random orders too) leaves a module the
    # verifier accepts, that re-parses, and that the reference interpreter runs to the numbers it
    # gave before.
    check_ir(p, order)


@pytest.mark.no_round_trip
@pytest.mark.parametrize("p", REGRESSIONS, ids=lambda p: f"regression{REGRESSIONS.index(p)}")
def test_regressions(p: Program):
    assert check(p) == "ok"


@pytest.mark.no_round_trip
@pytest.mark.parametrize("p", RAISING, ids=lambda p: f"raising{RAISING.index(p)}")
def test_raising_regressions(p: Program):
    assert check(p) == "both raise"


@pytest.mark.no_round_trip
@pytest.mark.parametrize("p", ILL_CONDITIONED, ids=lambda p: f"bf16_{ILL_CONDITIONED.index(p)}")
def test_ill_conditioned_compressed_regressions(p: Program):
    # the same shapes; rounding to bf16 alone moves the numbers (the program without compression
    # must agree exactly)
    assert check(p) == "ok (bf16: shapes only)"
    assert check(dataclasses.replace(p, compression=None)) == "ok"

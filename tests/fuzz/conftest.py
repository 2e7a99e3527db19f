"""STRATEGAX_FUZZ_MUTANT=NAME runs these tests against a deliberately broken pass
(tests/fuzz/mutants.py; tools/fuzz.py --mutants does, to check that the fuzzer catches it)."""
import os

import pytest

from .mutants import mutated


@pytest.fixture(autouse=True, scope="session")
def _mutant():
    name = os.environ.get("STRATEGAX_FUZZ_MUTANT")
    if not name:
        yield
        return
    with mutated(name):
        yield

"""The suite's schedule over pytest-xdist's workers (tests/conftest.py): the slow files handed out
first are test files that exist, each named once, none of them a Ray file (those go to one worker
together, first); the Ray files are those asking for the session's cluster."""
from pathlib import Path

from conftest import SLOW_FIRST, file_rank, uses_ray

TESTS = Path(__file__).resolve().parent


def test_slow_first_names_existing_test_files_once():
    # Intent: a renamed or misspelt file in SLOW_FIRST would silently go back to the end of the run.
    missing = [name for name in SLOW_FIRST if not (TESTS / name).is_file()]
    assert not missing, missing
    assert len(set(SLOW_FIRST)) == len(SLOW_FIRST)
    assert not [name for name in SLOW_FIRST if uses_ray(TESTS / name)]


def test_ray_files_first_then_slow_files_in_order_then_the_rest():
    # Intent: the order pytest_collection_modifyitems gives: the Ray group, SLOW_FIRST's files in
    # their order, then every other file.
    assert uses_ray(TESTS / "test_ray_train.py") and uses_ray(TESTS / "test_ps_updates.py")
    assert not uses_ray(TESTS / "test_multi_worker.py")
    ranks = [file_rank(TESTS / name) for name in ("test_ps_updates.py", *SLOW_FIRST, "test_schedule.py")]
    assert ranks == sorted(ranks) and ranks[0] == (0,) and ranks[-1] == (2,)

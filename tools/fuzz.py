"""Long differential-fuzzing runs of strategax (issue 35), beside the suite's small budget
(tests/fuzz/test_fuzz.py):

    python tools/fuzz.py --examples 20000 [--ir-every 5] [--seed 1] [--log fuzz.jsonl]
    python tools/fuzz.py --mutants [NAME ...]     # does the suite-budget fuzzer catch each?

A run draws random replica programs (tests/fuzz/programs.py) and checks each against NumPy and
one-device JAX; every `--ir-every`-th program also goes through every pass and pipeline
against the reference interpreter (tests/fuzz/ir_modules.py). It goes on past failures: each
distinct failure (its exception type and first line, numbers masked) is shrunk greedily (fewer
steps, fewer replicas, plainer inputs, no options) and printed as a `Program(...)` to paste
into tests/fuzz/regressions.py. The log has one JSON line per failure and a summary line.
`--mutants` runs `pytest tests/fuzz` once per mutant of tests/fuzz/mutants.py and records
which test caught it. Run it with `nice -n 19`: it keeps one CPU busy.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("STRATEGAX_VERIFY", "1")
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def signature(e: BaseException) -> str:
    """A failure's kind: its type and first line, numbers and ids masked."""
    first = re.sub(r"[0-9]+(\.[0-9]+)?", "#", (str(e).splitlines() or [""])[0])
    return f"{type(e).__name__}: {first[:160]}"


def attempt(p, ir_order=None) -> str | BaseException:
    """The outcome of one program: "ok", "both raise", "refused: ...", or the exception."""
    from fuzz.ir_modules import check_ir
    from fuzz.programs import check
    try:
        outcome = check(p)
        if ir_order is not None and outcome == "ok":
            check_ir(p, ir_order)
        return outcome
    except Exception as e:  # noqa: BLE001 - every failure is recorded
        return e


def shrink(p, failing: str, ir_order=None):
    """A smaller program failing the same way (greedy: each simplification kept if it does)."""
    def same(q) -> bool:
        out = attempt(q, ir_order)
        return isinstance(out, BaseException) and signature(out) == failing

    changed = True
    while changed:
        changed = False
        candidates = [dataclasses.replace(p, steps=p.steps[:i] + p.steps[i + 1:]) for i in range(len(p.steps))
                      if len(p.steps) > 1]
        candidates += [dataclasses.replace(p, n=m, rows=p.rows[:m] if p.inputs == "ragged" else p.rows)
                       for m in (1, 2, 4) if m < p.n and (p.inputs != "dataset")]
        candidates += [dataclasses.replace(p, inputs="per_replica", rows=())] if p.inputs != "per_replica" else []
        candidates += [dataclasses.replace(p, bytes_per_pack=0)] if p.bytes_per_pack else []
        candidates += [dataclasses.replace(p, compression=None)] if p.compression else []
        candidates += [dataclasses.replace(p, seed=0)] if p.seed else []
        candidates += [dataclasses.replace(p, steps=tuple((k, 0 if i else i, 0 if j else j) for k, i, j in p.steps))]
        for q in candidates:
            if q != p and same(q):
                p, changed = q, True
                break
    return p


def campaign(args) -> int:
    from hypothesis import HealthCheck, Phase, given, settings, strategies as st
    from fuzz.programs import programs

    outcomes: collections.Counter = collections.Counter()
    failures: dict[str, dict] = {}
    log = open(args.log, "a") if args.log else None
    start, count = time.time(), [0]

    @settings(max_examples=args.examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(programs(max_steps=args.max_steps), st.lists(st.integers(0, 30), max_size=4))
    def one(p, order):
        count[0] += 1
        if count[0] % 100 == 0:
            print(f"{count[0]} programs, {time.time() - start:.0f} s: {dict(outcomes)}", flush=True)
        ir_order = order if args.ir_every and count[0] % args.ir_every == 0 else None
        out = attempt(p, ir_order)
        if not isinstance(out, BaseException):
            outcomes[out[:110]] += 1
            return
        sig = signature(out) + (" [bf16 compression]" if p.compression else "")
        outcomes["FAILED"] += 1
        if log:
            log.write(json.dumps({"failed": repr(p), "signature": sig}) + "\n")
        if sig in failures:
            failures[sig]["count"] += 1
            return
        small = shrink(p, sig, ir_order)
        failures[sig] = {"signature": sig, "program": repr(p), "shrunk": repr(small), "ir_order": ir_order,
                         "count": 1, "traceback": "".join(traceback.format_exception(out))[-3000:]}
        print(f"\nFAILURE {sig}\n  shrunk: {small!r}\n", flush=True)
        if log:
            log.write(json.dumps(failures[sig]) + "\n")
            log.flush()

    if args.seed is not None:
        import hypothesis
        one = hypothesis.seed(args.seed)(one)
    try:
        one()
    except KeyboardInterrupt:
        pass
    summary = {"programs": count[0], "seconds": round(time.time() - start), "outcomes": dict(outcomes),
               "distinct_failures": list(failures)}
    print(json.dumps(summary, indent=1))
    if log:
        log.write(json.dumps({"summary": summary}) + "\n")
    return 1 if failures else 0


def mutants(names: list[str]) -> int:
    from fuzz.mutants import MUTANTS
    results = {}
    for name in names or list(MUTANTS):
        env = dict(os.environ, STRATEGAX_FUZZ_MUTANT=name, PYTHONPATH=str(ROOT))
        start = time.time()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                               "tests/fuzz/test_fuzz.py"], cwd=ROOT, env=env, capture_output=True, text=True)
        failed = re.findall(r"^FAILED (\S+)", proc.stdout, re.M)
        caught = proc.returncode != 0
        results[name] = {"what": MUTANTS[name][3], "caught": caught, "by": failed,
                         "seconds": round(time.time() - start)}
        print(f"{name}: {'CAUGHT by ' + ', '.join(failed) if caught else 'not caught'} "
              f"({results[name]['seconds']} s)", flush=True)
    print(json.dumps(results, indent=1))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="differential fuzzing of strategax (issue 35)")
    ap.add_argument("--examples", type=int, default=1000, help="programs to draw")
    ap.add_argument("--max-steps", type=int, default=8, help="the most steps a program has")
    ap.add_argument("--ir-every", type=int, default=5, help="every Nth program also through every pass (0: never)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--log", default=None, help="append failures and the summary here (JSON lines)")
    ap.add_argument("--mutants", nargs="*", default=None, help="check the suite-budget fuzzer against mutants")
    args = ap.parse_args(argv)
    if args.mutants is not None:
        return mutants(args.mutants)
    return campaign(args)


if __name__ == "__main__":
    sys.exit(main())

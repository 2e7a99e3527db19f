"""Long differential-fuzzing runs of strategax (issue 35), beside the suite's small budget
(tests/fuzz/test_fuzz.py):

    python tools/fuzz.py --examples 20000 [--ir-every 5] [--seed 1] [--log fuzz.jsonl]
    python tools/fuzz.py --examples 20000 --chunk 500 --seed 1000 --log-dir DIR   # resumable
    python tools/fuzz.py --report DIR             # a chunked run's totals so far
    python tools/fuzz.py --kinds transpose --examples 500   # steps biased to transposes
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
import hashlib
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
sys.path[:0] = [str(ROOT)]


def signature(e: BaseException) -> str:
    """A failure's kind: its type and first line, numbers and ids masked."""
    first = re.sub(r"[0-9]+(\.[0-9]+)?", "#", (str(e).splitlines() or [""])[0])
    return f"{type(e).__name__}: {first[:160]}"


def attempt(p, ir_order=None) -> str | BaseException:
    """The outcome of one program: "ok", "both raise", "refused: ...", or the exception."""
    from tests.fuzz.ir_modules import check_ir
    from tests.fuzz.programs import check
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
        candidates += [dataclasses.replace(p, n=m, rows=p.rows[:m] if p.inputs in ("ragged", "wide") else p.rows)
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
    from hypothesis import Phase, given, settings, strategies as st
    from tests.fuzz.programs import ALL_HEALTH_CHECKS, KINDS, TRANSPOSE_KINDS, programs

    outcomes: collections.Counter = collections.Counter()
    failures: dict[str, dict] = {}
    log = open(args.log, "a") if args.log else None
    start, count = time.time(), [0]
    seen: set[str] = set()  # a hash of each program drawn: how many were distinct
    kinds = TRANSPOSE_KINDS if args.kinds == "transpose" else KINDS

    @settings(max_examples=args.examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=ALL_HEALTH_CHECKS)
    @given(programs(max_steps=args.max_steps, kinds=kinds), st.lists(st.integers(0, 30), max_size=4))
    def one(p, order):
        count[0] += 1
        seen.add(hashlib.sha1(repr(p).encode()).hexdigest()[:16])
        if count[0] % 100 == 0:
            print(f"{count[0]} programs, {time.time() - start:.0f} s: {dict(outcomes)}", flush=True)
            if log:  # a run stopped part-way still counts what it ran
                log.write(json.dumps({"progress": _summary(count[0], start, outcomes, failures, seen)}) + "\n")
                log.flush()
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
    summary = _summary(count[0], start, outcomes, failures, seen)
    if args.hashes:
        Path(args.hashes).write_text("".join(h + "\n" for h in sorted(seen)))
    print(json.dumps(summary, indent=1))
    if log:
        log.write(json.dumps({"summary": summary}) + "\n")
    return 1 if failures else 0


def _summary(programs: int, start: float, outcomes, failures, seen) -> dict:
    return {"programs": programs, "distinct_programs": len(seen), "seconds": round(time.time() - start),
            "outcomes": dict(outcomes), "distinct_failures": list(failures)}


def chunked(args) -> int:
    """`--examples N` as chunks of `--chunk` programs, each its own process with its own seed
    (`--seed`, `--seed`+1, ...) and log (DIR/seed-S.jsonl); a chunk whose log has its summary is
    skipped, so a stopped run resumes where it was. `--report DIR` adds the chunks up."""
    out = Path(args.log_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = args.seed or 0
    for k in range((args.examples + args.chunk - 1) // args.chunk):
        seed, log = base + k, out / f"seed-{base + k}.jsonl"
        if log.exists() and any('"summary"' in line for line in log.read_text().splitlines()):
            continue
        examples = min(args.chunk, args.examples - k * args.chunk)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--examples", str(examples), "--seed", str(seed),
               "--max-steps", str(args.max_steps), "--ir-every", str(args.ir_every), "--log", str(log),
               "--hashes", str(out / f"seed-{seed}.programs")]
        print(f"chunk {k}: {' '.join(cmd[1:])}", flush=True)
        subprocess.run(cmd, cwd=ROOT, check=False)
    return report(out)


def report(out: Path) -> int:
    """The chunks' totals: programs run (a stopped chunk's last progress line counts), distinct
    programs, outcomes and each distinct failure (its signature, count and shrunk program)."""
    totals: collections.Counter = collections.Counter()
    programs = seconds = 0
    failures: dict[str, dict] = {}
    hashes: set[str] = set()
    for log in sorted(Path(out).glob("seed-*.jsonl")):
        last = None
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            if "summary" in entry or "progress" in entry:
                last = entry.get("summary") or entry["progress"]
            elif "signature" in entry and "shrunk" in entry:  # the first of its kind, shrunk
                known = failures.setdefault(entry["signature"], dict(entry, count=0))
                known.setdefault("shrunk", entry["shrunk"])
            elif "signature" in entry:
                failures.setdefault(entry["signature"], {"signature": entry["signature"], "program": entry["failed"],
                                                         "count": 0})
                failures[entry["signature"]]["count"] += 1
        if last:
            programs += last["programs"]
            seconds += last["seconds"]
            for k, v in last["outcomes"].items():  # one kind per message, whatever the variable is called
                totals[re.sub(r"@\w+", "@V", k)[:100]] += v
        h = log.with_suffix(".programs")
        if h.exists():
            hashes.update(h.read_text().split())
    summary = {"programs": programs, "distinct_programs_in_finished_chunks": len(hashes), "seconds": seconds,
               "outcomes": dict(totals), "failures": list(failures.values())}
    print(json.dumps(summary, indent=1))
    return 1 if failures else 0


def mutants(names: list[str]) -> int:
    from tests.fuzz.mutants import MUTANTS
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
    ap.add_argument("--kinds", choices=("all", "transpose"), default="all",
                    help="the steps drawn: every kind, or biased to transposes and their collectives")
    ap.add_argument("--log", default=None, help="append failures and the summary here (JSON lines)")
    ap.add_argument("--mutants", nargs="*", default=None, help="check the suite-budget fuzzer against mutants")
    ap.add_argument("--hashes", default=None, help="write a hash of each program drawn here")
    ap.add_argument("--chunk", type=int, default=0, help="run as chunks of this many programs (resumable)")
    ap.add_argument("--log-dir", default=None, help="with --chunk: each chunk's log goes here")
    ap.add_argument("--report", default=None, metavar="DIR", help="add up a chunked run's logs")
    args = ap.parse_args(argv)
    if args.mutants is not None:
        return mutants(args.mutants)
    if args.report:
        return report(Path(args.report))
    if args.chunk:
        if not args.log_dir:
            ap.error("--chunk needs --log-dir")
        return chunked(args)
    return campaign(args)


if __name__ == "__main__":
    sys.exit(main())

"""Shared machinery for the TensorFlow recording drivers.

Each driver (record_<group>.py) registers scenarios with ``@scenario``.  A
scenario runs in its own Python process (TF's collectives clash across
MirroredStrategy objects in one process):

    python record_<group>.py --list                       # scenario names
    python record_<group>.py --scenario NAME --out F.json # run one
    python _common.py merge --group G --dir DIR --out tests/data/tf/G.json

Nothing here imports TensorFlow until a scenario actually runs, so ``--list``
and ``merge`` are cheap.
"""

import argparse
import json
import os
import subprocess
import sys
import traceback

_tf = None
_SCENARIOS = {}  # name -> dict(fn=..., devices=int or None, doc=str)


# --------------------------------------------------------------------------
# registration

def scenario(name, devices=(2,)):
    """Register ``fn(tf, n)`` once per device count as ``name_r{n}``.

    ``devices=None`` registers a "parent" scenario that does not import TF
    itself (it spawns child processes); it is called as ``fn(None, None)``.
    Names starting with "_" are hidden (not listed; used by parents).
    """
    def deco(fn):
        doc = (fn.__doc__ or "").strip()
        if devices is None:
            _SCENARIOS[name] = dict(fn=fn, devices=None, doc=doc)
        else:
            for n in devices:
                _SCENARIOS["%s_r%d" % (name, n)] = dict(fn=fn, devices=n, doc=doc)
        return fn
    return deco


# --------------------------------------------------------------------------
# TF setup

def setup(n):
    """Import TF and split the CPU into ``n`` logical devices."""
    global _tf
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * n)
    _tf = tf
    return tf


def mirrored(tf, n):
    return tf.distribute.MirroredStrategy(["CPU:%d" % i for i in range(n)])


# --------------------------------------------------------------------------
# encoding to JSON

def err(e):
    msg = str(e)
    rec = {"error": type(e).__name__, "message": msg[:300]}
    if len(msg) > 300:
        # tf.function errors start with "in user code: File ..."; keep the end too
        rec["message_tail"] = msg[-300:]
    return rec


def attempt(f, *args, **kwargs):
    """enc(f(*args, **kwargs)), or the error record."""
    try:
        return enc(f(*args, **kwargs))
    except Exception as e:  # noqa: BLE001 -- we record every error
        return err(e)


def _tensor_rec(arr, kind=None):
    import numpy as np
    arr = np.asarray(arr)
    rec = {"dtype": str(arr.dtype), "shape": list(arr.shape)}
    if arr.dtype.kind in "SUO":
        rec["value"] = [x.decode() if isinstance(x, bytes) else str(x)
                        for x in arr.reshape(-1).tolist()]
    else:
        rec["value"] = arr.tolist()
    if kind:
        rec["kind"] = kind
    return rec


def enc(x):
    """Encode TF / NumPy / Python values as JSON-able data.

    Tensors and arrays -> {"dtype", "shape", "value"}; a plain tf.Variable adds
    "kind": "variable"; a DistributedValues (PerReplica, Mirrored,
    MirroredVariable, SyncOnReadVariable, ...) -> {"type": class name,
    "values": [one record per replica component]}; tuples/lists -> lists;
    dicts -> dicts; Python scalars and strings as is.
    """
    import numpy as np
    tf = _tf
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, (int, float)) and not isinstance(x, np.generic):
        return x
    if tf is not None:
        if isinstance(x, tf.distribute.DistributedValues):
            return {"type": type(x).__name__, "values": [enc(v) for v in x.values]}
        if isinstance(x, tf.Variable):
            return _tensor_rec(x.numpy(), kind="variable")
        if isinstance(x, tf.Tensor):
            return _tensor_rec(x.numpy())
        if isinstance(x, tf.TensorShape):
            return None if x.rank is None else list(x.as_list())
        if isinstance(x, tf.DType):
            return x.name
    if isinstance(x, (np.ndarray, np.generic)):
        return _tensor_rec(x)
    if isinstance(x, dict):
        return {str(k): enc(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [enc(v) for v in x]
    return {"unencodable_type": type(x).__name__, "repr": repr(x)[:300]}


def type_tree(x):
    """The Python type names of a nested structure (tuple/list/dict kept)."""
    if isinstance(x, dict):
        return {str(k): type_tree(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return {"container": type(x).__name__, "items": [type_tree(v) for v in x]}
    return type(x).__name__


def local(st, x):
    """[enc(c) for c in strategy.experimental_local_results(x)] or the error."""
    try:
        return [enc(c) for c in st.experimental_local_results(x)]
    except Exception as e:  # noqa: BLE001
        return err(e)


def dv_rec(st, x):
    """type name, repr, experimental_local_results of a (distributed) value."""
    return {"type": type(x).__name__, "repr": repr(x),
            "local_results": local(st, x)}


# --------------------------------------------------------------------------
# command line

def _tf_version():
    try:
        return _tf.__version__ if _tf is not None else None
    except Exception:  # noqa: BLE001
        return None


def run_one(name, out):
    spec = _SCENARIOS[name]
    n = spec["devices"]
    rec = {"description": spec["doc"], "num_devices": n}
    try:
        if n is None:
            result = spec["fn"](None, None)
        else:
            tf = setup(n)
            result = spec["fn"](tf, n)
        rec["result"] = result
    except Exception as e:  # noqa: BLE001
        rec["result"] = err(e)
        rec["traceback"] = traceback.format_exc()[-2000:]
    if isinstance(rec.get("result"), dict) and "tf_version" in rec["result"]:
        rec["tf_version"] = rec["result"].pop("tf_version")
    elif _tf is not None:
        rec["tf_version"] = _tf_version()
    text = json.dumps(rec, indent=1, sort_keys=False, allow_nan=True)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


def run_child(script, name, env_extra=None, timeout=300):
    """Run hidden scenario ``name`` of ``script`` in a fresh process."""
    import tempfile
    env = dict(os.environ)
    env.update(env_extra or {})
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        p = subprocess.run([sys.executable, script, "--scenario", name, "--out", out],
                           env=env, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0 or not os.path.exists(out):
            return {"result": {"error": "ProcessFailed",
                               "message": (p.stderr or "")[-300:]}}
        with open(out) as f:
            return json.load(f)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--list", action="store_true", help="print scenario names")
    ap.add_argument("--scenario", help="run this scenario")
    ap.add_argument("--out", help="write its JSON record here (default stdout)")
    args = ap.parse_args(argv)
    if args.list:
        for name in _SCENARIOS:
            if not name.startswith("_"):
                print(name)
        return 0
    if args.scenario:
        if args.scenario not in _SCENARIOS:
            print("unknown scenario %r" % args.scenario, file=sys.stderr)
            return 2
        run_one(args.scenario, args.out)
        return 0
    ap.print_help()
    return 2


def merge(argv=None):
    """Merge per-scenario records into one group file."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--group", required=True)
    ap.add_argument("--dir", required=True, help="folder with NAME.json / NAME.log")
    ap.add_argument("--names", required=True, help="file listing the scenario names")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    with open(args.names) as f:
        names = [line.strip() for line in f if line.strip()]
    scenarios, versions, devices = {}, set(), set()
    for name in names:
        path = os.path.join(args.dir, name + ".json")
        if os.path.exists(path):
            with open(path) as f:
                rec = json.load(f)
        else:
            log = ""
            lp = os.path.join(args.dir, name + ".log")
            if os.path.exists(lp):
                with open(lp, errors="replace") as f:
                    log = f.read()
            rec = {"result": {"error": "ProcessFailed", "message": log[-300:]}}
        if rec.get("tf_version"):
            versions.add(rec["tf_version"])
        if rec.get("num_devices"):
            devices.add(rec["num_devices"])
        for d in (rec.get("result") or {}).get("num_devices_used", []) if isinstance(rec.get("result"), dict) else []:
            devices.add(d)
        scenarios[name] = rec
    doc = {
        "group": args.group,
        "tf_version": sorted(versions)[0] if len(versions) == 1 else sorted(versions),
        "tf_package": "tensorflow-cpu",
        "num_devices": 2,
        "num_devices_used": sorted(devices),
        "note": ("Recorded from real TensorFlow by tools/tf_record (one process per "
                 "scenario; CPU split into num_devices logical devices; "
                 "MirroredStrategy over CPU:0..CPU:n-1). Scenario keys end in _r<n> = "
                 "number of devices/replicas. Tensors are {dtype, shape, value}; "
                 "distributed values are {type, values: [per replica]}; errors are "
                 "{error: ExceptionClassName, message: first 300 chars}."),
        "scenarios": scenarios,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("wrote %s (%d scenarios)" % (args.out, len(scenarios)))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "merge":
        sys.exit(merge(sys.argv[2:]))
    sys.exit(main())

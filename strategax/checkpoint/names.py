"""What a `Checkpoint` stores, by name: the objects given to it flattened to paths.

A variable is stored at its path (`("params", "w1")`); an optimizer at path `o` stores its
non-slot variables at `o + ("iterations",)` (with a dynamic loss scale also
`o + ("loss_scale", "current_loss_scale")` and `o + ("loss_scale", "good_steps")`) and each
slot at `o + ("slots",) + <its variable's path> + <optax state path>`, e.g.
`("optimizer", "slots", "params", "w1", "0", "mu")`. A Keras model or optimizer at path `k`
stores its variables by position, `k + ("variables", "0")`... (`keras_objects`). orbax names an entry by its
path joined with "." (`params.w1`), so two paths that join to the same name (with "/" read as
a separator too, as storage paths and TensorFlow read it), a key that is not
a non-empty string, or a slot whose variable the checkpoint does not hold cannot be stored
faithfully: they raise `CheckpointError` at save time instead of losing a value.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import CheckpointError
from ..variables import Optimizer, ShardedVariable, Variable
from .keras_objects import KerasEntry, build_optimizers, entries, is_keras_object

Path = tuple[str, ...]
Stored = Variable | ShardedVariable | KerasEntry  # what an entry holds: a sharded variable is stored whole


def dotted(path: Path) -> str:
    """orbax's name for an entry."""
    return ".".join(path)


def shown(path: Path) -> str:
    """How an entry is named in messages."""
    return "/".join(path)


@dataclass
class Objects:
    """The variables and optimizers of a Checkpoint, by path."""
    variables: dict[Path, Stored] = field(default_factory=dict)
    optimizers: dict[Path, Optimizer] = field(default_factory=dict)

    def path_of(self) -> dict[int, Path]:
        """Each variable's (first) path, by identity."""
        out: dict[int, Path] = {}
        for path, var in self.variables.items():
            out.setdefault(id(var), path)
        return out


def collect(objects: dict) -> Objects:
    """Walk the keyword arguments of `sx.Checkpoint` (nested dicts, lists and tuples)."""
    out = Objects()
    keras_objects: list = []
    _find_keras(objects, keras_objects)
    build_optimizers(keras_objects)  # a compiled model's optimizer gets its slots before they are named
    _walk((), objects, out)
    return out


def _find_keras(obj: Any, found: list) -> None:
    if is_keras_object(obj):
        found.append(obj)
    elif isinstance(obj, dict):
        for value in obj.values():
            _find_keras(value, found)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            _find_keras(value, found)


def _walk(path: Path, obj: Any, out: Objects) -> None:
    if isinstance(obj, (Variable, ShardedVariable)):  # a sharded one is stored whole
        out.variables[path] = obj
    elif isinstance(obj, Optimizer):
        out.optimizers[path] = obj
    elif is_keras_object(obj):  # a Keras model or optimizer: its variables, by position
        for name, entry in entries(obj):
            out.variables[path + ("variables", name)] = entry
    elif isinstance(obj, dict):
        for key, value in obj.items():
            if not isinstance(key, str) or not key:
                raise CheckpointError(
                    f"sx.Checkpoint key {key!r} at {shown(path) or 'the top level'} is not a non-empty "
                    "string: it cannot be stored as a name", "use non-empty string keys")
            _walk(path + (key,), value, out)
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            _walk(path + (str(i),), value, out)
    else:
        raise CheckpointError(f"sx.Checkpoint cannot save {type(obj).__name__} at {shown(path)!r}",
                              "pass variables, optimizers, Keras models and optimizers, or dicts/lists of them")


def stored(objects: Objects) -> dict[Path, Stored]:
    """Every entry the checkpoint stores, by path; raises on names orbax cannot keep apart."""
    entries: dict[Path, Stored] = dict(objects.variables)
    paths = objects.path_of()
    shards = {id(s): path for path, v in objects.variables.items() if isinstance(v, ShardedVariable)
              for s in v.variables}
    for opt_path, opt in objects.optimizers.items():
        for sub_path, var in opt.non_slot_variables().items():
            entries[opt_path + sub_path] = var
        for var, state_path, slot in opt.slot_variables():
            if id(var) in shards:
                raise CheckpointError(
                    f"optimizer {shown(opt_path)!r} keeps state for {var.name!r}, a shard of sharded variable "
                    f"{shown(shards[id(var)])!r}: optimizer state of sharded variables cannot be stored yet",
                    "checkpoint the model without the optimizer (its variables restore into any sharding)")
            if id(var) not in paths:
                raise CheckpointError(
                    f"optimizer {shown(opt_path)!r} keeps state for variable {var.name!r}, which this "
                    "Checkpoint does not hold (slots are stored under their variable's name)",
                    "give the Checkpoint every variable the optimizer updates")
            entries[slot_prefix(opt_path, paths[id(var)]) + state_path] = slot
    check_names(entries)
    return entries


def slot_prefix(opt_path: Path, var_path: Path) -> Path:
    return opt_path + ("slots",) + var_path


def flat_name(path: Path) -> str:
    """The one name a path flattens to where "." or "/" separates the levels (orbax joins them with
    ".", TensorFlow and storage paths with "/"): `("a/b",)`, `("a.b",)` and `("a", "b")` are one."""
    return ".".join(path).replace("/", ".")


def check_names(paths) -> None:
    """Two paths that flatten to one name (`{"a/b": x, "a": {"b": y}}`) are an error."""
    seen: dict[str, Path] = {}
    for path in paths:
        other = seen.setdefault(flat_name(path), path)
        if other != path:
            raise CheckpointError(
                f"sx.Checkpoint entries {list(other)} and {list(path)} flatten to one name "
                f"({flat_name(path)!r}, levels joined by '.' or '/'): one of them could be lost",
                "rename one of them (keys without '.' or '/' never collide)")


def nest(flat: dict[Path, Any]) -> dict:
    """The nested dict orbax stores, from entries by path."""
    tree: dict = {}
    for path, value in flat.items():
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return tree

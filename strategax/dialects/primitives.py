"""The JAX primitives an op or an attribute may name, by name: JAX's own (found through
`jax.extend.core.primitives`), strategax's, and any other the importer has met in this process."""
from __future__ import annotations

from jax.extend import core as jex_core

_PRIMITIVES: dict[str, jex_core.Primitive] = {}
_jax_primitives_loaded = False


def register_primitive(prim: jex_core.Primitive) -> None:
    """Make `prim` findable by name, for `#primitive<"name">` and for `jax.<name>` ops."""
    _PRIMITIVES.setdefault(prim.name, prim)


def find_primitive(name: str) -> jex_core.Primitive | None:
    """The primitive called `name`: one JAX exports or one registered; None if there is none."""
    global _jax_primitives_loaded
    if not _jax_primitives_loaded:
        from jax.extend.core import primitives

        _jax_primitives_loaded = True
        for value in vars(primitives).values():
            if isinstance(value, jex_core.Primitive):
                register_primitive(value)
    return _PRIMITIVES.get(name)

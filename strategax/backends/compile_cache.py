"""JAX's persistent compilation cache for strategax programs, on by default.

XLA's compilation is most of a program's first call (70% on CPU, over 95% on a GPU), and a
restarted job pays it again. So the first program strategax lowers turns JAX's persistent
cache on in a folder of this user's (`$XDG_CACHE_HOME/strategax/xla`, else
`~/.cache/strategax/xla`, made private to the user), and a new process that compiles the same
program loads it from there. `STRATEGAX_COMPILATION_CACHE=DIR` moves the folder,
`STRATEGAX_COMPILATION_CACHE=0` keeps the cache off; a JAX cache folder the user set
(`jax_compilation_cache_dir`) is used as it is. JAX's cache is one per process: once on, it
also serves the process's own `jax.jit` programs under JAX's rule (those that took a second or
more to compile); strategax programs are written whatever their compile time.

A cache is a side output: a folder that cannot be made or written warns once and the
program compiles as without it; a write that fails later (a full disk) is JAX's warning, never
an error. In a multi-worker job only worker 0 writes (JAX's rule) and every worker reads: an
entry's key is a hash of the whole program and its devices, so a worker finds only programs
it would have compiled itself, and the folder is private to the user whose job it is.
"""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import warnings
from pathlib import Path

import jax

from ..errors import user_location

ENV = "STRATEGAX_COMPILATION_CACHE"
_OFF = ("0", "off", "false", "no")
_configured: list = []  # [folder or None] once decided for this process


def default_dir() -> Path:
    """The per-user folder: `$XDG_CACHE_HOME/strategax/xla`, else `~/.cache/strategax/xla`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "strategax" / "xla"


def configure() -> str | None:
    """Turn the cache on for this process as STRATEGAX_COMPILATION_CACHE says (decided once);
    the folder in use, or None when the cache is off."""
    if _configured:
        return _configured[0]
    setting = os.environ.get(ENV, "").strip()
    # the user's own JAX setting wins
    folder = jax.config.jax_compilation_cache_dir  # pyright: ignore[reportAttributeAccessIssue]  set by name at run time
    if folder is None and setting.lower() not in _OFF:
        path = Path(setting).expanduser() if setting else default_dir()
        problem = _unusable(path, private=not setting)
        if problem is None:
            folder = str(path)
            jax.config.update("jax_compilation_cache_dir", folder)
        else:
            file, line = user_location()
            warnings.warn_explicit(
                f"strategax's compilation cache folder {path} cannot be used ({problem}); programs are "
                f"compiled as without it. fix: set {ENV} to a folder of yours that you can write, or "
                f"{ENV}=0 to keep the cache off", RuntimeWarning, file, line)
    _configured.append(folder)
    return folder


def _unusable(path: Path, private: bool) -> str | None:
    """Why `path` cannot hold the cache, or None: it must be a folder this process can write;
    the default one also this user's alone (a cache entry is code the process will run)."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".probe-"):
            pass
        if private:
            info = path.stat()
            if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return "it is not private to this user: others could place programs in it"
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    return None


def writing():
    """The context of a strategax program's first run (its compilation): JAX writes it to the
    cache whatever its compile time (JAX's own threshold, a second, stays for other programs)."""
    if not _configured or _configured[0] is None or _min_compile_time is None:
        return contextlib.nullcontext()
    return _min_compile_time(0.0)


try:  # JAX's threshold as a context manager (private: without it JAX's global rule applies)
    from jax._src.config import persistent_cache_min_compile_time_secs as _min_compile_time
except ImportError:  # pragma: no cover - another JAX version
    _min_compile_time = None

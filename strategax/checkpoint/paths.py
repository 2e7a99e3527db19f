"""Where checkpoints go, and how many savers share a directory without losing anything.

`save(directory)` (an existing directory, or a path ending in a separator) writes
`directory/ckpt-N`; `save(prefix)` (anything else, TensorFlow's file prefix) writes `prefix-N`
in the prefix's directory. N is one more than the largest number in the directory, taken by
renaming a fresh folder (named after its owner) to `.sx-claim-N`, which fails when that claim
exists, so two savers never hold the same N; orbax writes the checkpoint inside the claim, and
it is published with one `rename` to its final name, so `name-N` only ever names a complete
checkpoint. A claim whose owner process is gone (killed mid-save) is removed by the next save in
that directory, as is the trash of checkpoints a manager deleted (renamed away first, so deletion
is atomic too).
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import uuid

from ..errors import CheckpointError, DistributionTypeError
from . import storage

NUMBERED = re.compile(r"(?P<name>[^.].*)-(?P<number>\d+)\Z")
CLAIM, NEW, TRASH = ".sx-claim-", ".sx-new-", ".sx-trash-"
OWNER = "owner"


def is_checkpoint(path: str) -> bool:
    """Whether `path` is one checkpoint folder (orbax's, or a reference to another worker's)
    rather than a folder of them."""
    return os.path.isfile(os.path.join(path, "_CHECKPOINT_METADATA")) or storage.reference(path) is not None


def resolve(target: str) -> tuple[str, str]:
    """(directory, name): where `save(target)` writes `name-N`."""
    target = os.fspath(target)
    if target.endswith(os.sep) or os.path.isdir(target):
        if is_checkpoint(target):
            raise CheckpointError(f"{target} is a checkpoint, not a directory to save checkpoints in",
                                  "save into its parent directory")
        return os.path.normpath(target), "ckpt"
    directory, name = os.path.split(target)
    check_name(name)
    return directory or ".", name


def check_name(name: str) -> None:
    """A checkpoint name (TensorFlow's prefix) that `name-N` can be made of."""
    if not NUMBERED.match(f"{name}-1") or os.sep in name:
        raise CheckpointError(f"checkpoint prefix {name!r} is not a plain file name (empty, with a "
                              "separator, or starting with '.': hidden names are strategax's claims)",
                              "use a prefix like 'ckpt'")


def numbered(directory: str) -> list[tuple[int, str]]:
    """(N, path) of every published checkpoint in `directory` (any name), oldest first. Only
    real folders directly inside count: a link is never followed out of the directory."""
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for entry in entries:
        m = NUMBERED.match(entry.name)
        if m and entry.is_dir(follow_symlinks=False):
            out.append((int(m.group("number")), entry.path))
    return sorted(out)


def check_path(path, api: str) -> None:
    """`path` is a string or os.PathLike."""
    if not isinstance(path, (str, os.PathLike)):
        raise DistributionTypeError(f"{api} takes a path, not {type(path).__name__} {path!r:.40}",
                                    "pass the path as a string")


def latest_checkpoint(directory: str) -> str | None:
    """The path of the newest complete checkpoint in `directory` (the largest N), or None."""
    if not isinstance(directory, (str, os.PathLike)):
        raise DistributionTypeError(f"latest_checkpoint takes a directory path, not {type(directory).__name__} "
                              f"{directory!r:.40}", "pass the directory the checkpoints were saved in, as a string")
    found = numbered(os.fspath(directory))
    return found[-1][1] if found else None


# --- claims -----------------------------------------------------------------------------------
def _start_time(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _new_token() -> str:
    """Who is saving (pid, its start time, host) and a unique part: `.sx-new-<token>` names a
    claim being made, so even a saver killed right after its mkdir leaves an owner behind."""
    return f"{os.getpid()}.{_start_time(os.getpid())}.{uuid.uuid4().hex}.{socket.gethostname()}"


def _owner_alive(entry: os.DirEntry) -> bool:
    if entry.name.startswith(NEW):
        token = entry.name[len(NEW):]
    else:
        try:
            with open(os.path.join(entry.path, OWNER)) as f:
                token = f.read()
        except OSError:
            return False  # every claim gets its owner record before it gets its name
    pid, started, _, host = (token.split(".", 3) + ["", "", "", ""])[:4]
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's saver: cannot tell, never remove
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return not started or _start_time(int(pid)) in ("", started)


def remove_stale(directory: str) -> None:
    """Remove the claims of dead savers and the trash of deleted checkpoints."""
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.name.startswith(TRASH) or entry.name.startswith((CLAIM, NEW)) and not _owner_alive(entry):
            shutil.rmtree(entry.path, ignore_errors=True)


def _numbers_in_use(directory: str) -> list[int]:
    numbers = [n for n, _ in numbered(directory)]
    for name in os.listdir(directory):
        if name.startswith(CLAIM) and name[len(CLAIM):].isdigit():
            numbers.append(int(name[len(CLAIM):]))
    return numbers


def _fresh(directory: str) -> str:
    token = _new_token()
    folder = os.path.join(directory, f"{NEW}{token}")
    os.mkdir(folder)
    with open(os.path.join(folder, OWNER), "w") as f:
        f.write(token)
    return folder


class Claim:
    """The number N of one save, held from before the write until its publication: a folder
    made (with its owner record) under a unique name, then renamed to `.sx-claim-N`, which
    fails when another saver holds N."""

    def __init__(self, directory: str, name: str, number: int | None = None):
        os.makedirs(directory, exist_ok=True)
        remove_stale(directory)
        self.directory, self.name = directory, name
        fresh = _fresh(directory)
        try:
            while True:
                n = number if number is not None else max(_numbers_in_use(directory), default=0) + 1
                folder = os.path.join(directory, f"{CLAIM}{n}")
                try:
                    os.rename(fresh, folder)  # never replaces a claim: it holds its owner record
                except OSError as e:
                    if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                        raise
                    if number is not None:
                        raise CheckpointError(f"checkpoint number {n} in {directory} is being written by "
                                              "another save", "use another number") from None
                    continue
                if any(m == n for m, _ in numbered(directory)):  # published while we looked
                    os.rename(folder, fresh)
                    if number is not None:
                        raise CheckpointError(f"a checkpoint numbered {n} already exists in {directory}",
                                              "use another number")
                    continue
                break
        except BaseException:
            shutil.rmtree(fresh, ignore_errors=True)
            raise
        self.number, self.folder = n, folder
        self.path = os.path.join(directory, f"{name}-{n}")
        self.staging = os.path.join(folder, f"{name}-{n}")  # orbax writes here

    def publish(self) -> None:
        """Move the complete checkpoint to its final name (one atomic rename)."""
        try:
            os.rename(self.staging, self.path)  # never replaces a non-empty folder
        except OSError as e:
            raise CheckpointError(f"cannot publish checkpoint {self.path}: {e}",
                                  "is another program writing the same name?") from e
        _sync_directory(self.directory)
        self.abandon()

    def abandon(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def delete(path: str) -> None:
    """Delete a checkpoint atomically: rename it away, then remove it."""
    trash = os.path.join(os.path.dirname(path), f"{TRASH}{uuid.uuid4().hex}")
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return  # another manager deleted it first
    shutil.rmtree(trash, ignore_errors=True)


def _sync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

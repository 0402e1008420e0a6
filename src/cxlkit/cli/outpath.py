"""Output paths of the CLI (-o/--out, --plots, --log) checked before any work starts: a
measurement takes minutes and its result must not be lost for a mistyped path. The rule: a
file's folder must exist and be writable (never created); a --plots folder is created when its
parent exists and is writable, its parents never."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .main import fail


def _writable_folder(d: Path, flag: str, path: Path) -> None:
    """Fail (exit 2, naming flag) unless d is an existing folder this process can create
    files in; tried with a real file, as permissions alone do not tell (/proc, read-only
    mounts, root)."""
    if not d.exists():
        fail(f"{flag} {path}: folder {d} does not exist; create it (mkdir -p {d}) or name a "
             "path in an existing folder")
    if not d.is_dir():
        fail(f"{flag} {path}: {d} is not a directory; name a path in a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".cxlkit-probe-", dir=d)
    except OSError as e:
        fail(f"{flag} {path}: cannot write in {d} ({e.strerror}); name a path in a writable "
             "folder")
    os.close(fd)
    os.unlink(probe)


def check_file(path: Path, flag: str) -> None:
    """path can be written as a file (created or replaced) by `flag`."""
    if path.is_dir():
        fail(f"{flag} {path}: is a directory; give a file name, e.g. {flag} "
             f"{path / 'result.json'}")
    _writable_folder(path.parent, flag, path)
    if path.exists() and not os.access(path, os.W_OK):
        fail(f"{flag} {path}: not writable by this user; name another file")


def check_dir(path: Path, flag: str) -> None:
    """path is a writable folder, or one that can be made in an existing writable parent."""
    if path.exists():
        if not path.is_dir():
            fail(f"{flag} {path}: exists and is not a directory; name a folder")
        _writable_folder(path, flag, path)
    else:
        _writable_folder(path.parent, flag, path)

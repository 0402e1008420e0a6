"""Which group the CLI opens a pool file shared with. The library opens only files of this user
that no other user can write unless told a group; on the command line a group-shared pool
(`cxlkit pool create NAME --group G`, mode 0660) is opened shared when this user owns it or is
in its group, or when --group names its group."""
from __future__ import annotations

import grp
import os
import stat as S
from typing import Optional

import typer

GROUP_OPT = typer.Option(None, "--group", help="open a pool shared with this group (group "
                         "name or gid); default: a group-shared pool is opened when this user "
                         "owns it or is in its group")


def group_id(group: str) -> int:
    """The gid of a group name or number; ValueError naming --group when there is none."""
    if group.isdigit():
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise ValueError(f"group {group!r} (--group): no such group; give a group name from "
                         "/etc/group or a gid") from None


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def my_groups() -> set[int]:
    return {os.getegid(), *os.getgroups()}


def group_shared(st: os.stat_result) -> bool:
    """A regular file its group may write and every user may not: how `--group` makes pools."""
    return (S.S_ISREG(st.st_mode) and bool(st.st_mode & S.S_IWGRP)
            and not st.st_mode & S.S_IWOTH)


def shared_gid(path: str, group: Optional[str]) -> Optional[int]:
    """The gid to open `path` shared with, or None to open it as a private pool. Raises
    ValueError (naming --group) for a group-shared pool of a group this user is not in and
    did not name, or one of another group than --group names."""
    want = None if group is None else group_id(group)
    try:
        st = os.stat(path)
    except OSError:
        return want  # a pool to create, a device, memfd: the library says what is wrong
    if not group_shared(st):
        return want
    if want is not None and st.st_gid != want:
        raise ValueError(f"pool {path}: shared with group {group_name(st.st_gid)}, not "
                         f"{group_name(want)} (--group); pass --group "
                         f"{group_name(st.st_gid)} or name another pool")
    if want is not None or st.st_uid == os.geteuid() or st.st_gid in my_groups():
        return st.st_gid
    raise ValueError(f"pool {path}: shared with group {group_name(st.st_gid)} (owner uid "
                     f"{st.st_uid}), which this user is not in; pass --group "
                     f"{group_name(st.st_gid)} to open it anyway, or join that group")

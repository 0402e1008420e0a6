"""How a SubgroupStore cuts optimizer state into subgroups, assigns them to paths (Eq. 1 of
MLP-Offload: T_i = ceil(M*B_i/sum B), adjusted to sum to M) and records a complete generation
(the manifest every durable directory path keeps)."""
from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

ALIGN = 4096
MANIFEST_VERSION = 1


def pad(nbytes: int) -> int:
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True)
class Piece:
    """Elements [lo, hi) of param pid live at element offset `at` of the subgroup."""

    pid: int
    lo: int
    hi: int
    at: int


@dataclass(frozen=True)
class Subgroup:
    idx: int
    group: int
    nparams: int
    pieces: tuple[Piece, ...]

    @property
    def state_nbytes(self) -> int:  # fp32 master, exp_avg, exp_avg_sq
        return pad(12 * self.nparams)


def cut(group_sizes: Sequence[Sequence[int]], subgroup_params: int) -> list[Subgroup]:
    """Subgroups of at most subgroup_params elements over each param group's params in
    order (a param may span subgroups; a subgroup never spans groups: each group has its
    own hyperparameters)."""
    if isinstance(subgroup_params, bool) or not isinstance(subgroup_params, int) \
            or subgroup_params <= 0:
        raise ValueError(f"subgroup_params {subgroup_params!r}: expected an int > 0")
    out: list[Subgroup] = []
    pid = 0
    for g, sizes in enumerate(group_sizes):
        pieces: list[Piece] = []
        fill = 0
        for n in sizes:
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"param {pid} of group {g}: size {n!r}, expected an int >= 0")
            lo = 0
            while lo < n:
                take = min(n - lo, subgroup_params - fill)
                pieces.append(Piece(pid, lo, lo + take, fill))
                lo += take
                fill += take
                if fill == subgroup_params:
                    out.append(Subgroup(len(out), g, fill, tuple(pieces)))
                    pieces, fill = [], 0
            pid += 1
        if fill:
            out.append(Subgroup(len(out), g, fill, tuple(pieces)))
    return out


def layout_key(group_sizes: Sequence[Sequence[int]], subgroup_params: int) -> int:
    """64-bit key of the layout: a file from another model or subgroup size is refused."""
    text = json.dumps([list(map(int, s)) for s in group_sizes]) + f"/{subgroup_params}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def eq1_counts(m: int, bandwidths: Sequence[float]) -> list[int]:
    """T_i = ceil(M*B_i/sum B), then the paths that rounded up most give one back until the
    counts sum to M, those holding one last (a path with B_i = 0 takes none while another
    can)."""
    if not bandwidths:
        raise ValueError("no paths")
    bw = [max(0.0, float(b)) for b in bandwidths]
    if any(not math.isfinite(b) for b in bw):
        raise ValueError(f"bandwidths {list(bandwidths)!r}: expected finite numbers")
    total = sum(bw)
    if total <= 0:
        bw, total = [1.0] * len(bw), float(len(bw))
    ideal = [m * b / total for b in bw]
    t = [math.ceil(x - 1e-9) for x in ideal]
    while sum(t) > m:
        # give back from paths holding more than one first: every path with bandwidth keeps
        # a subgroup while M allows it (ceil's promise), the ones that rounded up most first
        pool = [j for j in range(len(t)) if t[j] > 1] or [j for j in range(len(t)) if t[j] > 0]
        i = max(pool, key=lambda j: (t[j] - ideal[j], -j))
        t[i] -= 1
    return t


def interleave(counts: Sequence[int]) -> list[int]:
    """A path per subgroup with the given counts, spread evenly (smooth weighted round
    robin), so consecutive subgroups mostly sit on different paths and their I/O overlaps."""
    m = sum(counts)
    cur = [0] * len(counts)
    out = []
    for _ in range(m):
        for i, c in enumerate(counts):
            cur[i] += c
        i = max(range(len(counts)), key=lambda j: (cur[j], -j))
        cur[i] -= m
        out.append(i)
    return out


def rebalance(assign: list[int], counts: Sequence[int]) -> list[int]:
    """The new per-subgroup paths for new counts, moving as few subgroups as possible: a
    path over its count gives its highest-numbered subgroups to paths under theirs."""
    new = list(assign)
    have = [0] * len(counts)
    for p in new:
        have[p] += 1
    spare: list[int] = []
    for p in range(len(counts)):
        extra = have[p] - counts[p]
        if extra > 0:
            mine = [k for k in range(len(new) - 1, -1, -1) if new[k] == p][:extra]
            spare.extend(mine)
    spare.sort()
    for p in range(len(counts)):
        while have[p] < counts[p] and spare:
            k = spare.pop(0)
            have[new[k]] -= 1
            new[k] = p
            have[p] += 1
    return new


def manifest_name(namespace: str) -> str:
    return f"cxlkit-subgroups.{namespace}.json"


def write_manifest(directory: str, namespace: str, doc: dict) -> None:
    """tmp file, fsync, rename, fsync of the directory: a reader sees the old manifest or
    the new one, never a torn one."""
    final = os.path.join(directory, manifest_name(namespace))
    tmp = final + ".tmp"
    data = json.dumps(doc, sort_keys=True).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def read_manifest(directory: str, namespace: str) -> dict | None:
    """The manifest of a directory, or None when it has none; ValueError when it is not
    one this version wrote (the file is untrusted input)."""
    path = os.path.join(directory, manifest_name(namespace))
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read(1 << 26))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: unreadable subgroup manifest ({e})") from None
    if not isinstance(doc, dict) or doc.get("version") != MANIFEST_VERSION \
            or not isinstance(doc.get("commit"), int) or not isinstance(doc.get("entries"), list):
        raise ValueError(f"{path}: not a subgroup manifest of version {MANIFEST_VERSION}")
    for e in doc["entries"]:
        if not (isinstance(e, list) and len(e) == 3 and all(isinstance(x, int) for x in e)
                and e[1] in (0, 1) and e[2] >= 0):
            raise ValueError(f"{path}: bad entry {e!r}")
    return doc


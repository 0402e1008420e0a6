"""Fuzz every on-media structure of a pool: copies of a template pool get random or targeted
mutations (superblock fields, host slot fields and lists, the mutex, name entries, leases,
object headers, free-block links, payload bytes), and each copy is opened, listed, read,
verified, fsck'd and repaired in a forked child with a timeout, as host 0 and as host 1.

Outcomes per trial: "ok" (worked, or refused with a typed error), "crash" (the child died of
a signal), "hang" (no answer within the timeout) and "wrong" (a whole read of a checksummed
object returned bytes that are not the ones written, without an error).

  .venv/bin/python tests/fuzz/pool_fuzz.py --trials 2000 --seed 1     # the figures
  .venv/bin/python tests/fuzz/pool_fuzz.py --v1 --trials 500 --seed 1  # version 1 pools
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import struct
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import crc32c, in_child  # noqa: E402

MiB = 1 << 20
HDR = 320
SB_FIELDS = [(8, "<I"), (12, "<I"), (16, "<Q"), (40, "<I"), (44, "<I"), (48, "<I"), (52, "<I"),
             (56, "<I"), (60, "<I"), (88, "<Q"), (96, "<Q"), (104, "<Q"), (112, "<Q"),
             (120, "<Q"), (128, "<Q"), (136, "<Q"), (144, "<Q"), (152, "<Q"), (160, "<Q"),
             (176, "<I"), (184, "<Q"), (200, "<Q"), (208, "<Q"), (216, "<Q"), (224, "<Q"),
             (232, "<Q")]
SB_CHECKSUM = 240  # format v2: the superblock is 248 bytes
CLAIM_FIELDS = [(0, "<Q"), (64, "<Q")]  # a slot's claim lines: x (nonce), door
SLOT_FIELDS = [(32, "<Q"), (40, "<q"), (56, "<Q"), (64, "<Q"), (72, "<Q"), (80, "<Q"), (128, "<i"),
               (132, "<I"), (136, "<i"), (144, "<i"), (192, "<Q"), (200, "<Q"), (208, "<Q"),
               (216, "<Q"), (224, "<Q"), (232, "<Q"), (240, "<I"), (244, "<I"), (248, "<Q")]
HDR_FIELDS = [(0, "<I"), (4, "<I"), (8, "<Q"), (16, "<Q"), (24, "<Q"), (32, "<Q"), (40, "<Q"),
              (48, "<q"), (56, "<I"), (60, "<H"), (62, "<H"), (64, "<Q"), (72, "<Q")]
ENTRY_FIELDS = [(0, "<Q"), (8, "<Q"), (16, "<Q"), (24, "<I"), (28, "<I")]
LEASE_FIELDS = [(0, "<Q"), (8, "<Q"), (16, "<I"), (20, "<I")]


def payload(name: str, n: int) -> bytes:
    seed = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return (seed * (n // 8 + 1))[:n]


def u(path: str, off: int, fmt: str = "<Q") -> int:
    with open(path, "rb") as f:
        f.seek(off)
        return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]


def make_template(path: str) -> dict:
    """A pool with objects of two hosts (checksummed, plain, being created, destroyed)."""
    import cxlkit

    objs = {}
    with cxlkit.Pool(path, size=8 * MiB, host_id=0, max_hosts=2, max_objects=256,
                     lease_timeout=1) as p0, cxlkit.Pool(path, host_id=1) as p1:
        for h, p in ((0, p0), (1, p1)):
            for i, n in enumerate((64, 1000, 5000, 70_000)):
                name = f"h{h}-o{i}"
                o = p.create(name, data=payload(name, n))
                objs[name] = o.offset - HDR
                o.close()
            p.create(f"h{h}-gone", data=b"g" * 300).close()
            p.destroy(f"h{h}-gone")
            o = p.create(f"h{h}-plain", 200)  # published without a checksum
            o.write(0, payload(f"h{h}-plain", 200))
            o.publish()
            objs[f"h{h}-plain"] = o.offset - HDR
            o.close()
    geo = {k: u(path, off) for k, off in (("names_off", 120), ("names_bytes", 128),
                                          ("name_slots", 88), ("leases_off", 136),
                                          ("leases_bytes", 144), ("data_off", 152),
                                          ("data_bytes", 160), ("size", 16),
                                          ("extent_bytes", 200), ("nextents", 208),
                                          ("extmap_off", 216), ("extmap_bytes", 224),
                                          ("claims_off", 232))}
    return {"objs": objs, **geo}


def first_run_block(path: str, t: dict, h: int) -> int:
    """The first block of host h's first run (its extent map's first START)."""
    base = t["extmap_off"] + h * t["extmap_bytes"]
    for e in range(t["nextents"]):
        if (u(path, base + 8 * (e // 32)) >> (2 * (e % 32))) & 3 == 3:
            return t["data_off"] + e * t["extent_bytes"]
    return t["data_off"]


def mutate(path: str, t: dict, rng: random.Random) -> str:
    size = os.path.getsize(path)
    kind = rng.choice(["random", "superblock", "slot", "entry", "lease", "header", "free",
                       "payload", "mutex", "extmap", "claim"])

    def value(fmt: str) -> int:
        bits = struct.calcsize(fmt) * 8
        signed = fmt[-1].islower() and fmt[-1] not in "b"
        v = rng.choice([0, 1, 2, 3, 63, 64, 255, 320, 4096, (1 << 20), (1 << 31) - 1, 1 << 40,
                        (1 << bits) - 1, rng.getrandbits(bits), rng.getrandbits(12)])
        v &= (1 << bits) - 1
        if signed and v >= 1 << (bits - 1):
            v -= 1 << bits
        return v

    def write(off: int, fmt: str, v: int) -> None:
        with open(path, "r+b") as f:
            f.seek(off)
            f.write(struct.pack(fmt, v))

    with open(path, "r+b") as f:
        if kind == "random":
            region = rng.choice([4096 * 3, t["data_off"], size])
            for _ in range(rng.randint(1, 8)):
                off = rng.randrange(region)
                f.seek(off)
                f.write(bytes([rng.getrandbits(8)]))
            return kind
    if kind == "superblock":  # fields changed with a valid checksum: only sanity checks stop it
        off, fmt = rng.choice(SB_FIELDS)
        write(off, fmt, value(fmt))
        with open(path, "r+b") as f:
            sb = bytearray(f.read(SB_CHECKSUM + 8))
        struct.pack_into("<Q", sb, SB_CHECKSUM, (1 << 32) | crc32c(bytes(sb[:SB_CHECKSUM])))
        with open(path, "r+b") as f:
            f.write(sb)
    elif kind in ("slot", "mutex"):
        h = rng.randrange(2)
        off, fmt = rng.choice(SLOT_FIELDS[5:9] if kind == "mutex" else SLOT_FIELDS)
        if kind == "slot" and rng.random() < 0.3:  # a list entry or a free-list head
            off, fmt = rng.choice([(256 + 8 * rng.randrange(64), "<Q"),
                                   (768 + 8 * rng.randrange(4), "<Q"),
                                   (1792 + 8 * rng.randrange(4), "<Q")])
        write(4096 + h * 4096 + off, fmt, value(fmt))
    elif kind == "entry":
        h = rng.randrange(2)
        base = t["names_off"] + h * t["names_bytes"]
        used = []
        with open(path, "rb") as f:
            f.seek(base)
            tab = f.read(t["name_slots"] * 32)
        for i in range(t["name_slots"]):
            if struct.unpack_from("<I", tab, i * 32 + 28)[0] in (1, 2):
                used.append(i)
        i = rng.choice(used) if used and rng.random() < 0.9 else rng.randrange(t["name_slots"])
        off, fmt = rng.choice(ENTRY_FIELDS)
        if off == 0 and rng.random() < 0.5:
            write(base + i * 32, "<Q", u(path, base + i * 32) ^ (1 << rng.randrange(64)))
        else:
            write(base + i * 32 + off, fmt, value(fmt))
    elif kind == "lease":
        h = rng.randrange(2)
        i = rng.randrange(8)
        off, fmt = rng.choice(LEASE_FIELDS)
        write(t["leases_off"] + h * t["leases_bytes"] + i * 32 + off, fmt, value(fmt))
    elif kind == "header":
        block = rng.choice(list(t["objs"].values()))
        off, fmt = rng.choice(HDR_FIELDS)
        write(block + off, fmt, value(fmt))
    elif kind == "extmap":  # a host's extent map: fields set to any state, words to anything
        h = rng.randrange(2)
        base = t["extmap_off"] + h * t["extmap_bytes"]
        w = rng.randrange(max(1, (t["nextents"] + 31) // 32) + 1)  # one word past the end too
        if rng.random() < 0.6:  # one 2-bit field (steal another host's extent, orphan, ...)
            old = u(path, base + 8 * w)
            sh = 2 * rng.randrange(32)
            write(base + 8 * w, "<Q", (old & ~(3 << sh)) | (rng.randrange(4) << sh))
        else:
            write(base + 8 * w, "<Q", value("<Q"))
    elif kind == "claim":  # a slot's claim lines: door closed or opened, nonce changed
        h = rng.randrange(2)
        off, fmt = rng.choice(CLAIM_FIELDS)
        write(t["claims_off"] + h * 128 + off, fmt, value(fmt))
    elif kind == "free":  # the free block after the last object of a host: links, sizes
        h = rng.randrange(2)
        block = first_run_block(path, t, h)
        while True:
            nb = u(path, block + 8)
            if u(path, block + 4, "<I") == 0 or nb < 384 or nb % 64:
                break
            block += nb
        off, fmt = rng.choice([(8, "<Q"), (16, "<Q"), (64, "<Q"), (72, "<Q"), (4, "<I")])
        write(block + off, fmt, value(fmt))
    elif kind == "payload":
        block = rng.choice(list(t["objs"].values()))
        write(block + HDR + rng.randrange(64), "<B", rng.getrandbits(8))
    return kind


def exercise(path: str, host: int) -> dict:
    """Everything a user does with a pool; typed errors are outcomes, not failures."""
    import cxlkit

    res = {"wrong": 0, "refused": 0, "read": 0}
    typed = (cxlkit.PoolError, KeyError, ValueError, OSError)
    try:
        with cxlkit.Pool(path, host_id=host) as p:
            try:
                names = [i.name for i in p.list()]
            except typed:
                names, res["refused"] = [], res["refused"] + 1
            for name in names + ["h0-o1", "h1-o2"]:
                try:
                    with p.open(name) as o:
                        data = o.read()
                        res["read"] += 1
                        info = p.info(name)
                        if (info.checksum is not None and name.startswith(("h0-o", "h1-o"))
                                and data != payload(name, len(data))):
                            res["wrong"] += 1
                        try:
                            o.verify()
                        except typed:
                            res["refused"] += 1
                except typed:
                    res["refused"] += 1
            for repair in (False, True):
                try:
                    p.fsck(repair=repair)
                except typed:
                    res["refused"] += 1
            try:
                p.create("fuzz-new", data=b"n" * 100).close()
                p.destroy("fuzz-new")
            except typed:
                res["refused"] += 1
    except typed:
        res["refused"] += 1
    return res


def run(trials: int, seed: int, timeout: float = 20.0, workdir: str = "/dev/shm") -> dict:
    rng = random.Random(seed)
    tmpl = os.path.join(workdir, f"cxlkit-fuzz-tmpl-{os.getpid()}")
    trial = os.path.join(workdir, f"cxlkit-fuzz-trial-{os.getpid()}")
    try:
        t = make_template(tmpl)
        out = Counter()
        kinds = Counter()
        failures = []
        for i in range(trials):
            shutil.copyfile(tmpl, trial)
            os.chmod(trial, 0o600)
            kind = mutate(trial, t, rng)
            kinds[kind] += 1
            for host in (0, 1):
                status, val = in_child(exercise, trial, host, timeout=timeout)
                if status == "ok":
                    out["wrong"] += val["wrong"]
                    out["reads"] += val["read"]
                    out["refusals"] += val["refused"]
                    if val["wrong"]:
                        failures.append((i, kind, host, "wrong bytes"))
                else:
                    out[status] += 1
                    failures.append((i, kind, host, status, val))
            out["trials"] += 1
        return {"trials": out["trials"], "crashes": out["signal"], "hangs": out["hang"],
                "untyped_errors": out["err"], "wrong_bytes": out["wrong"],
                "whole_reads": out["reads"], "typed_refusals": out["refusals"],
                "mutations": dict(kinds), "failures": failures[:20]}
    finally:
        for p in (tmpl, trial):
            if os.path.exists(p):
                os.unlink(p)


# ---- version 1 pools: the read-only view and `cxlkit pool upgrade` -------------
V1_SB_FIELDS = [f for f in SB_FIELDS if f[0] < 200] + [(200, "<Q")]
V1_SLOT_FIELDS = [(32, "<Q"), (40, "<q"), (56, "<Q")]


def make_v1_template(path: str) -> dict:
    """A v1 pool (tests/fuzz/v1pool.py) with checksummed objects of hosts 0, 1 and 3; host
    3's partition ends in a short free tail, so upgrade cuts through it."""
    import v1pool

    objs = {h: [(f"h{h}-o{i}", payload(f"h{h}-o{i}", 200 + 900 * i)) for i in range(4)]
            for h in (0, 1, 3)}
    g = v1pool.write_pool(path, 8 * MiB, objs, checksum=True)
    return g


def mutate_v1(path: str, g: dict, rng: random.Random) -> str:
    """One mutation of a v1 pool: superblock (checksum kept valid or not), slot liveness,
    a block header, a name entry, payload or random bytes."""
    kind = rng.choice(["superblock", "slot", "header", "entry", "payload", "random"])
    P, H = g["partition_bytes"], g["hosts"]
    with open(path, "r+b") as f:
        def put(off: int, fmt: str) -> None:
            n = struct.calcsize(fmt)
            v = rng.choice([0, 1, 64, 65536, ~0, rng.getrandbits(64)]) & ((1 << (8 * n)) - 1)
            f.seek(off)
            f.write(struct.pack(fmt.replace("q", "Q").replace("i", "I"), v))
        if kind == "superblock":
            off, fmt = rng.choice(V1_SB_FIELDS)
            put(off, fmt)
            if off != 200 and rng.random() < 0.8:
                f.seek(0)
                f.write(struct.pack("<Q", 0x4C4F4F504B4C5843))  # the magic, unless it was hit
                f.seek(8)
                f.write(struct.pack("<I", 1) if off != 8 or rng.random() < 0.5 else b"")
                f.seek(0)
                sb = f.read(200)
                f.seek(200)
                f.write(struct.pack("<Q", (1 << 32) | crc32c(sb)))
        elif kind == "slot":
            off, fmt = rng.choice(V1_SLOT_FIELDS)
            put(4096 + rng.randrange(H) * 4096 + off, fmt)
        elif kind == "header":
            h = rng.choice((0, 1, 3))
            block = g["data_off"] + h * P
            for _ in range(rng.randrange(4)):  # some block of the chain
                f.seek(block + 8)
                block += struct.unpack("<Q", f.read(8))[0]
            off, fmt = rng.choice(HDR_FIELDS)
            put(block + off, fmt)
        elif kind == "entry":
            h = rng.choice((0, 1, 3))
            e = rng.randrange(g["name_slots"])
            off, fmt = rng.choice(ENTRY_FIELDS)
            put(g["names_off"] + h * g["names_bytes"] + e * 32 + off, fmt)
        elif kind == "payload":
            f.seek(g["data_off"] + rng.choice((0, 1, 3)) * P + HDR + rng.randrange(200))
            f.write(bytes([rng.getrandbits(8)]))
        else:
            f.seek(rng.randrange(g["total"] - 8))
            f.write(rng.getrandbits(64).to_bytes(8, "little"))
    return kind


def exercise_v1(path: str) -> dict:
    """A v1 pool read through its read-only view, then upgraded and read as v2: typed errors
    are outcomes; a failed upgrade that changed the file, or wrong checksummed bytes, are not."""
    import warnings

    import cxlkit
    from cxlkit.pool.upgrade import upgrade

    res = {"wrong": 0, "refused": 0, "read": 0, "changed": 0}
    typed = (cxlkit.PoolError, KeyError, ValueError, OSError)

    def read_all(p) -> None:
        try:
            names = [i.name for i in p.list()]
        except typed:
            names, res["refused"] = [], res["refused"] + 1
        for name in names + ["h0-o1", "h3-o2"]:
            try:
                with p.open(name) as o:
                    data = o.read()
                    res["read"] += 1
                    if (p.info(name).checksum is not None and name.startswith("h")
                            and data != payload(name, len(data))):
                        res["wrong"] += 1
            except typed:
                res["refused"] += 1
        try:
            p.fsck(repair=False)
        except typed:
            res["refused"] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with cxlkit.Pool(path, host_id="fuzz-reader") as p:
                read_all(p)
        except typed:
            res["refused"] += 1
    before = hashlib.sha256(open(path, "rb").read()).hexdigest()
    try:
        upgrade(path)
    except typed:
        res["refused"] += 1
        res["changed"] += hashlib.sha256(open(path, "rb").read()).hexdigest() != before
        return res
    try:
        with cxlkit.Pool(path, host_id="fuzz-v2") as p:
            read_all(p)
    except typed:
        res["refused"] += 1
    return res


def run_v1(trials: int, seed: int, timeout: float = 20.0, workdir: str = "/dev/shm") -> dict:
    """The v1 fuzz: mutated copies of a v1 template, each exercised in a child."""
    rng = random.Random(seed)
    tmpl = os.path.join(workdir, f"cxlkit-fuzz-v1tmpl-{os.getpid()}")
    trial = os.path.join(workdir, f"cxlkit-fuzz-v1trial-{os.getpid()}")
    try:
        g = make_v1_template(tmpl)
        out, kinds, failures = Counter(), Counter(), []
        for i in range(trials):
            shutil.copyfile(tmpl, trial)
            os.chmod(trial, 0o600)
            kind = mutate_v1(trial, g, rng)
            kinds[kind] += 1
            status, val = in_child(exercise_v1, trial, timeout=timeout)
            if status == "ok":
                for k in ("wrong", "read", "refused", "changed"):
                    out[k] += val[k]
                if val["wrong"] or val["changed"]:
                    failures.append((i, kind, val))
            else:
                out[status] += 1
                failures.append((i, kind, status, val))
            out["trials"] += 1
        return {"trials": out["trials"], "crashes": out["signal"], "hangs": out["hang"],
                "untyped_errors": out["err"], "wrong_bytes": out["wrong"],
                "changed_by_failed_upgrade": out["changed"], "whole_reads": out["read"],
                "typed_refusals": out["refused"], "mutations": dict(kinds),
                "failures": failures[:20]}
    finally:
        for p in (tmpl, trial):
            if os.path.exists(p):
                os.unlink(p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per child")
    ap.add_argument("--v1", action="store_true", help="fuzz version 1 pools (read-only view "
                    "and upgrade) instead")
    a = ap.parse_args()
    t0 = time.monotonic()
    r = (run_v1 if a.v1 else run)(a.trials, a.seed, a.timeout)
    r["seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps(r))
    sys.exit(0 if r["crashes"] == r["hangs"] == r["wrong_bytes"] == r["untyped_errors"]
             == r.get("changed_by_failed_upgrade", 0) == 0 else 1)


if __name__ == "__main__":
    main()

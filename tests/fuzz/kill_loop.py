"""SIGKILL loop over three writers of three hosts sharing one pool: each round starts the
three, kills one of them (at random, after a random number of operations, wherever it is),
and checks the killed host's part as its next process sees it: fsck clean after repair, every
object whose publish returned is there with its bytes, no object lost, no DEAD or CREATING
block left once every host's next process ran (leases of dead readers on other hosts hold
DEAD blocks until then), and no leaked byte (used + free = partition, and fsck's bytes agree).

  .venv/bin/python tests/fuzz/kill_loop.py --kills 200      # the figures (one JSON line)
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import journal_state, payload  # noqa: E402

MiB = 1 << 20
HOSTS = (0, 1, 2)


def writer(path: str, host: int, seed: int, counter, journal: str) -> None:
    import cxlkit

    rng = random.Random(seed)
    fd = os.open(journal, os.O_WRONLY | os.O_APPEND)
    pool = cxlkit.Pool(path, host_id=host)
    mine = [o.name for o in pool.list() if o.host == host]
    held = []
    i = 0
    while True:
        i += 1
        r = rng.random()
        if len(mine) > 40:
            r = 0.6
        if r < 0.5 or not mine:
            name = f"h{host}-{seed}-{i}"
            n = rng.choice([1, 100, 4096, 50_000])
            os.write(fd, f"B {name}\n".encode())
            obj = pool.create(name, n)
            memoryview(obj)[:] = payload(name, n)
            obj.publish(checksum=True)
            obj.close()
            os.write(fd, f"P {name}\n".encode())
            mine.append(name)
        elif r < 0.8:
            name = mine.pop(rng.randrange(len(mine)))
            os.write(fd, f"B {name}\n".encode())
            pool.destroy(name)
            os.write(fd, f"D {name}\n".encode())
        else:
            others = [o.name for o in pool.list() if o.host != host and o.state == "live"]
            if others:
                try:
                    held.append(pool.open(rng.choice(others)))  # another host's object
                except (KeyError, cxlkit.PoolError):
                    pass  # destroyed meanwhile
            if len(held) > 4:
                held.pop(0).close()
        counter.value += 1


def check_host(path: str, host: int, journal: str) -> dict:
    """The killed host's part, as its next process sees it."""
    import cxlkit

    live, in_flight = journal_state(journal)
    with cxlkit.Pool(path, host_id=host) as pool:
        rep = pool.fsck(repair=True)
        names = {o.name for o in pool.list() if o.host == host}
        lost = sorted((live - {in_flight}) - names)
        extra = sorted(names - live - {in_flight})
        wrong = 0
        for name in names:
            with pool.open(name) as o:
                if o.read() != payload(name, o.nbytes):
                    wrong += 1
        st = pool.stat()
        leaked = st.extents_held * st.extent_bytes - st.used_bytes - st.free_bytes
        if in_flight and in_flight in names:
            pool.destroy(in_flight)  # resolve the uncertain one so the journal is exact
            live.add(in_flight)
        with open(journal, "a") as f:
            f.write(f"D {in_flight}\n" if in_flight else "")
        return {"clean": rep.clean, "lost": len(lost), "extra": len(extra), "wrong": wrong,
                "leaked": leaked, "dead": rep.objects_dead, "creating": rep.objects_creating}


def run(kills: int, seed: int, workdir: Path) -> dict:
    import cxlkit

    path = f"/dev/shm/cxlkit-killloop-{os.getpid()}"
    journals = {h: workdir / f"journal-{h}" for h in HOSTS}
    for j in journals.values():
        j.write_text("")
    cxlkit.Pool(path, size=48 * MiB, host_id=0, max_hosts=3, lease_timeout=2).close()
    ctx = mp.get_context("fork")
    rng = random.Random(seed)
    tot = {"kills": 0, "lost": 0, "extra": 0, "wrong": 0, "leaked_bytes": 0, "unclean_fsck": 0,
           "dead_left": 0, "creating_left": 0, "ops": 0}
    try:
        rounds = 0
        while tot["kills"] < kills:
            rounds += 1
            counters = {h: ctx.Value("q", 0, lock=False) for h in HOSTS}
            procs = {h: ctx.Process(target=writer, args=(path, h, rounds * 10 + h, counters[h],
                                                          str(journals[h]))) for h in HOSTS}
            for p in procs.values():
                p.start()
            victim = rng.choice(HOSTS)
            target = rng.randrange(1, 150)
            deadline = time.monotonic() + 30
            while counters[victim].value < target and procs[victim].is_alive() \
                    and time.monotonic() < deadline:
                os.sched_yield()
            for h, p in procs.items():  # the victim at its point; the others after it
                os.kill(p.pid, signal.SIGKILL)
                p.join()
                tot["ops"] += counters[h].value
                if p.exitcode != -signal.SIGKILL:
                    raise RuntimeError(f"writer of host {h} exited {p.exitcode} before the kill")
            tot["kills"] += len(HOSTS)
            for h in HOSTS:
                r = check_host(path, h, str(journals[h]))
                tot["lost"] += r["lost"]
                tot["extra"] += r["extra"]
                tot["wrong"] += r["wrong"]
                tot["leaked_bytes"] += r["leaked"]
                tot["unclean_fsck"] += not r["clean"]
            # every host's next process has now cleared its dead processes' leases: a second
            # repair by each owner frees what those leases held; nothing DEAD or CREATING stays
            for h in HOSTS:
                with cxlkit.Pool(path, host_id=h) as pool:
                    pool.fsck(repair=True)
            with cxlkit.Pool(path, host_id=0) as pool:
                rep = pool.fsck(repair=False)
                tot["dead_left"] += rep.objects_dead
                tot["creating_left"] += rep.objects_creating
                tot["unclean_fsck"] += not rep.clean
        tot["rounds"] = rounds
        return tot
    finally:
        Path(path).unlink(missing_ok=True)


def main() -> None:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        r = run(a.kills, a.seed, Path(d))
    r["seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps(r))
    bad = r["lost"] + r["wrong"] + r["leaked_bytes"] + r["unclean_fsck"] + r["dead_left"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

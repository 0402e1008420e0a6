"""The preload library's fast path (native/preload/hooks.c): small calls of every wrapped kind
go straight to glibc and never into the library's slow paths, whose entries the library counts
and logs at exit (CXLKIT_PRELOAD_LOG); every block it places carries glibc's IS_MMAPPED bit,
the one bit free and realloc test. tests/preload/fastpath_prog.c is the program."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

import preload_prog as PP

ROUNDS = 20000
KINDS = ("malloc", "calloc", "realloc", "free", "aligned", "mmap", "munmap")


@pytest.fixture(scope="module")
def prog(tmp_path_factory):
    return str(PP.build("fastpath_prog", tmp_path_factory.mktemp("prog")))


def _run(prog, env, rounds=ROUNDS):
    r = subprocess.run([prog, str(rounds)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("ok"), (r.stdout, r.stderr)
    return r.stdout


def slow_counts(text: str) -> dict[str, int]:
    """The "slow path at exit" line of the log: entries per kind, and "boot" (before set up)."""
    (rest,) = [r for _, v, r in PP.log_lines(text) if v == "slow" and "at exit" in r]
    words = rest.split(":", 1)[1].replace("before setup", "boot").split()
    return {k: int(v) for k, v in zip(words[::2], words[1::2])}


@pytest.mark.parametrize("cache", ["64M", "0"])
def test_small_calls_never_enter_the_slow_path(prog, tmp_path, cache):
    log = tmp_path / "log"
    _run(prog, PP.preload_env("0:1", log, CXLKIT_PRELOAD_CACHE=cache))
    c = slow_counts(log.read_text())
    # ROUNDS x (malloc, calloc, realloc, 2 x free, posix_memalign, aligned_alloc, memalign,
    # ...) and ROUNDS/16 small mmap/munmap pairs: none of them in the counts. What is counted:
    # the 7 large blocks (realloc's growth is one realloc and the malloc it makes) and their
    # frees.
    assert {k: c[k] for k in KINDS} == {"malloc": 2, "calloc": 1, "realloc": 1, "free": 7,
                                        "aligned": 4, "mmap": 0, "munmap": 0}, c
    assert len(PP.placements(log.read_text())) == 7


def test_every_placed_block_carries_the_mmapped_bit(prog, tmp_path):
    log = tmp_path / "log"
    out = _run(prog, PP.preload_env("0:1", log), rounds=10)
    bits = dict(l.split()[1:] for l in out.splitlines() if l.startswith("mmapped "))
    assert bits == {k: "1" for k in ("malloc", "calloc", "posix_memalign", "aligned_alloc",
                                     "memalign", "valloc", "realloc")}
    placed = {p["what"] for p in PP.placements(log.read_text())}
    assert placed == {"malloc", "calloc", "posix_memalign", "aligned_alloc", "memalign",
                      "valloc"}  # realloc's growth is a placed malloc


def test_placement_off_forwards_every_call(prog, tmp_path):
    # a stripe naming a node without memory: the library says so once and only forwards
    log = tmp_path / "log"
    env = PP.preload_env("0:1,1000:1", log)
    r = subprocess.run([prog, "2000"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "node 1000 has no memory" in r.stderr
    assert not PP.placements(log.read_text())
    c = slow_counts(log.read_text())
    assert all(c[k] == 0 for k in KINDS), c


def test_without_a_log_the_library_prints_nothing(prog):
    r = subprocess.run([prog, "100"], env=PP.preload_env("0:1"), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == ""
    assert not re.search(r"cxlkit-preload", r.stdout)


def test_another_malloc_s_blocks_are_never_read_below(prog, tmp_path):
    # guard_malloc.so puts a PROT_NONE page right below every block: reading the word where
    # glibc keeps its header would crash. The library must see that malloc is not glibc's,
    # leave its blocks alone and never look below them (free and realloc included).
    cc = shutil.which("cc") or shutil.which("gcc")
    guard = tmp_path / "guard_malloc.so"
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", str(guard),
                    str(PP.ROOT / "tests" / "preload" / "guard_malloc.c")], check=True)
    bare = dict(PP.preload_env(None), LD_PRELOAD=str(guard))
    crash = subprocess.run([prog, "10"], env=bare, capture_output=True, text=True, timeout=60)
    assert crash.returncode < 0  # the program's own read below a block faults: the guard works
    log = tmp_path / "log"
    env = PP.preload_env("0:1", log)
    env["LD_PRELOAD"] = f"{env['LD_PRELOAD']} {guard}"
    r = subprocess.run([prog, "3000", "foreign"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("ok"), (r.returncode, r.stderr)
    text = log.read_text()
    assert "malloc is not glibc's: malloc blocks are left alone" in text
    assert not PP.placements(text)
    c = slow_counts(text)
    assert c["free"] == 0 and c["mmap"] == 0 and c["munmap"] == 0, c


def test_freed_mid_size_blocks_keep_their_pages_as_under_glibc_alone(prog, tmp_path):
    # 1 MiB blocks (between glibc's 128 KiB default threshold and the minimum) freed and made
    # again: glibc alone raises its trim threshold and keeps the pages. Before the library set
    # M_TRIM_THRESHOLD with the mmap threshold, each free gave the pages back and each malloc
    # faulted all 256 in again (448k faults for 2000 rounds, against 591).
    def faults(env):
        r = subprocess.run([prog, "400", "midsize"], env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        return int(r.stdout.split()[1])

    bare = PP.preload_env(None)
    bare.pop("LD_PRELOAD")
    assert faults(bare) < 2000
    assert faults(PP.preload_env("0:1")) < 2000  # 400 rounds x 256 pages = 102,400 before
    env = PP.preload_env("0:1", MALLOC_TRIM_THRESHOLD_="131072")  # the user's setting is kept
    assert faults(env) > 400 * 200

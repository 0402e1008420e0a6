"""Every CLI error is one line on stderr, `Error: <what> <which thing>: <why>; <what to do>`,
naming CLI flags, exit code 2, never a traceback; output paths are checked before a
measurement starts."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cxlkit.cli.main import one_line, run


def cli(capsys, *args) -> tuple[int, str, str]:
    code = run(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("Error: "), err
    assert "[Errno" not in err and "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("spelling", [["kv", "stats", "/etc/passwd"],
                                      ["kv", "stats", "--pool", "/etc/passwd"]])
def test_kv_stats_of_a_file_that_is_not_a_pool_is_one_line_exit_2(capsys, spelling):
    code, _, err = cli(capsys, *spelling)
    assert code == 2
    line = one_error_line(err)
    assert "/etc/passwd" in line


def test_kv_stats_without_a_pool_is_one_line_exit_2(capsys):
    code, _, err = cli(capsys, "kv", "stats", "/dev/shm/cxlkit-test-cli-errors-none")
    assert code == 2
    assert "pool /dev/shm/cxlkit-test-cli-errors-none: no such pool" in one_error_line(err)


@pytest.mark.parametrize("cmd", ["memory", "copy"])
@pytest.mark.parametrize("flag,target", [("-o", "r.json"), ("--plots", "png")])
def test_bench_output_paths_are_checked_before_the_measurement(capsys, tmp_path, cmd, flag,
                                                               target, monkeypatch):
    from cxlkit.bench import copy, memory

    def measured(*a, **k):
        raise AssertionError("the measurement ran before the output paths were checked")

    for mod in (copy, memory):
        monkeypatch.setattr(mod, "run", measured)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    bad = blocker / target  # under a regular file: can never be written
    code, _, err = cli(capsys, "bench", cmd, "--quick", flag, str(bad))
    assert code == 2
    line = one_error_line(err)
    assert str(bad) in line and "is not a directory" in line


def test_bench_out_that_is_a_directory_is_refused_at_once(capsys, tmp_path):
    code, _, err = cli(capsys, "bench", "memory", "--quick", "-o", str(tmp_path))
    assert code == 2 and "is a directory" in one_error_line(err)


def test_an_exception_a_command_lets_out_becomes_one_line(capsys, monkeypatch):
    from cxlkit.cli import kv

    def boom(*args, **kwargs):
        raise RuntimeError("a bad\nthing happened")

    monkeypatch.setattr(kv, "collect", boom)
    code, _, err = cli(capsys, "kv", "stats", "x")
    assert code == 2
    assert one_error_line(err) == "Error: a bad thing happened"


def test_one_line_names_the_path_of_an_OSError():
    assert one_line(FileNotFoundError(2, "No such file", "/x/y")) == "/x/y: No such file"
    assert one_line(KeyError("object 'a' not in pool p")) == "object 'a' not in pool p"
    assert one_line(ValueError("")) == "ValueError"


def test_the_installed_entry_point_prints_one_line_and_exits_2():
    r = subprocess.run([sys.executable, "-c", "from cxlkit.cli.main import main; main()",
                        "kv", "stats", "/etc/passwd"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "/etc/passwd" in r.stderr


# ---- cxlkit pool upgrade ----------------------------------------------------------------
@pytest.mark.parametrize("what", ["not a pool", "missing"])
def test_pool_upgrade_of_a_bad_path_is_one_line_exit_2(capsys, tmp_path, what):
    path = tmp_path / "p"
    if what == "not a pool":
        path.write_bytes(b"x" * 8192)
        path.chmod(0o600)
    code, _, err = cli(capsys, "pool", "upgrade", str(path))
    assert code == 2
    line = one_error_line(err)
    assert str(path) in line
    assert ("not a cxlkit pool" if what == "not a pool" else "no such pool") in line
    if what == "not a pool":
        assert path.read_bytes() == b"x" * 8192


# ---- output paths: checked before any work, folders never created silently -------------------
@pytest.mark.parametrize("cmd", ["memory", "copy"])
@pytest.mark.parametrize("flag,bad,why", [
    ("-o", "/proc/cxlkit-r.json", "cannot write in /proc"),
    ("-o", "{tmp}/no/such/r.json", "does not exist"),
    ("--plots", "/proc/cxlkit-plots", "cannot write in /proc"),
    ("--plots", "{tmp}/no/such/plots", "does not exist")])
def test_bench_unwritable_or_missing_folders_are_refused_naming_the_flag(capsys, tmp_path, cmd,
                                                                         flag, bad, why):
    bad = bad.format(tmp=tmp_path)
    code, _, err = cli(capsys, "bench", cmd, "--quick", flag, bad)
    assert code == 2
    line = one_error_line(err)
    assert why in line and bad in line
    assert ("--out" if flag == "-o" else flag) in line
    assert not (tmp_path / "no").exists()  # nothing created


def test_run_stripe_log_in_a_missing_folder_is_refused_before_the_command(capsys, tmp_path):
    log = tmp_path / "no" / "log.txt"
    code, _, err = cli(capsys, "run", "--stripe", "0:1", "--log", str(log), "--", "true")
    assert code == 2
    assert "--log" in one_error_line(err) and "does not exist" in err


# ---- one voice: every command's bad input is `Error: ...`, one line, exit 2 ------------------
BAD_INPUT = [
    ["pool", "create", "{pool}", "--size", "4K"],
    ["pool", "create", "{pool}", "--size", "1x"],
    ["pool", "create", "{pool}", "--size", "100T"],
    ["pool", "create", "{pool}", "--numa-node", "7"],
    ["pool", "create", "{pool}", "--max-hosts", "0"],
    ["pool", "create", "{pool}", "--max-hosts", "y"],
    ["pool", "stat", "{pool}"], ["pool", "ls", "{pool}"], ["pool", "hosts", "{pool}"],
    ["pool", "fsck", "{pool}"], ["pool", "release", "{pool}", "1"],
    ["pool", "upgrade", "{pool}"], ["pool", "stat", "{pool}", "--group", "no-such-group-x"],
    ["pool", "stat", "/etc/passwd"],
    ["kv", "stats", "{pool}"], ["kv", "stats", "/etc/passwd"],
    ["bench", "memory", "--quick", "--threads", "x"],
    ["bench", "memory", "--quick", "--nodes", "99"],
    ["bench", "memory", "--quick", "--load-kind", "bogus"],
    ["bench", "memory", "--quick", "-o", "/proc/cxlkit-r.json"],
    ["bench", "copy", "--quick", "--cpu", "4095"],
    ["plan", "vectordb", "--vectors", "x", "--dim", "8"], ["plan", "kv", "--bogus"],
    ["plan", "train", "--params", "x"],
    ["tiers", "--sysfs-root", "/nonexistent-sysfs"],
    ["policy", "weights", "--from-bench", "/nonexistent.json"],
    ["audit", "999999999"], ["run", "--bind", "99", "--", "true"],
    ["train", "demo", "--steps", "x"], ["demo", "--only", "bogus"], ["doctor", "--bogus"],
    ["no-such-command"],
]


@pytest.mark.parametrize("args", BAD_INPUT, ids=lambda a: " ".join(a))
def test_every_command_says_bad_input_in_one_voice(capsys, args):
    pool = "/dev/shm/cxlkit-test-cli-errors-none"
    code, _, err = cli(capsys, *[a.format(pool=pool) for a in args])
    assert code == 2, err
    line = one_error_line(err)
    assert "=True" not in line and "max_hosts" not in line  # CLI flags, not Python arguments
    assert not Path(pool).exists()


def test_a_missing_pool_reads_the_same_in_every_command(capsys):
    pool = "/dev/shm/cxlkit-test-cli-errors-none"
    for args in (["pool", "stat"], ["pool", "ls"], ["pool", "hosts"], ["pool", "fsck"],
                 ["pool", "upgrade"], ["kv", "stats"]):
        code, _, err = cli(capsys, *args, pool)
        assert code == 2 and f"pool {pool}: no such pool;" in one_error_line(err), args


def test_pool_create_of_an_existing_pool_without_size_opens_it(capsys, monkeypatch):
    import json
    import uuid

    monkeypatch.setenv("CXLKIT_HOST_ID", "0")
    pool = f"/dev/shm/cxlkit-test-cli-errors-{uuid.uuid4().hex[:8]}"
    try:
        assert cli(capsys, "pool", "create", pool, "--size", "128M")[0] == 0
        code, out, err = cli(capsys, "pool", "create", pool, "--json")
        assert code == 0, err
        assert json.loads(out)["size"] == 128 << 20
        code, out, _ = cli(capsys, "pool", "stat", pool)
        assert "128 MiB" in out  # a unit that fits
        code, _, err = cli(capsys, "pool", "create", pool, "--size", "4K")
        assert code == 2
        line = one_error_line(err)
        assert "--size 4 KiB" in line and "exists with size 128 MiB" in line
    finally:
        Path(pool).unlink(missing_ok=True)


def test_sizes_are_printed_with_a_unit_that_fits():
    from cxlkit.cli.tables import size

    assert [size(n) for n in (0, 4096, 1536, 64 << 20, 1 << 30, (3 << 29))] == \
        ["0 B", "4 KiB", "1.5 KiB", "64 MiB", "1 GiB", "1.5 GiB"]


def test_threads_beyond_the_cpus_warn_naming_the_flag(capsys, tmp_path):
    import os

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    too_many = len(os.sched_getaffinity(0)) + 1
    code, _, err = cli(capsys, "bench", "memory", "--quick", "--threads", f"1,{too_many}",
                       "-o", str(blocker / "r.json"))  # refused before measuring
    assert code == 2
    assert f"Warning: --threads {too_many}: more than the" in err


def test_an_empty_pool_says_what_is_unclaimed(capsys, monkeypatch):
    import uuid

    monkeypatch.setenv("CXLKIT_HOST_ID", "0")
    monkeypatch.setenv("COLUMNS", "120")
    pool = f"/dev/shm/cxlkit-test-cli-errors-{uuid.uuid4().hex[:8]}"
    try:
        code, out, err = cli(capsys, "pool", "create", pool, "--size", "64M")
        assert code == 0, err
        line = next(x for x in out.splitlines() if "unclaimed" in x)
        assert "MiB" in line and " 0 B" not in line
    finally:
        Path(pool).unlink(missing_ok=True)

"""`cxlkit pool create | ls | stat | rm | fsck` (--json and tables) and the pool demo."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

import cxlkit
from cxlkit.cli import main as cli_main
from cxlkit.cli.pool import run_demo

cli_main._load()
runner = CliRunner()


@pytest.fixture
def name(monkeypatch):
    n = f"cxlkit-test-cli-{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("CXLKIT_HOST_ID", "0")
    yield n
    Path(f"/dev/shm/{n}").unlink(missing_ok=True)


def run(*args: str):
    return runner.invoke(cli_main.app, ["pool", *args])


def test_create_stat_ls_rm_fsck_json(name):
    r = run("create", name, "--size", "16M", "--max-hosts", "2", "--json")
    assert r.exit_code == 0, r.output
    st = json.loads(r.stdout)
    assert st["size"] == 16 << 20 and st["max_hosts"] == 2 and st["kind"] == "file"
    with cxlkit.Pool(name) as p:
        p.create("a", data=b"1234").close()
    objs = json.loads(run("ls", name, "--json").stdout)
    assert [(o["name"], o["nbytes"], o["state"]) for o in objs] == [("a", 4, "live")]
    assert json.loads(run("stat", name, "--json").stdout)["objects"] == 1
    rep = json.loads(run("fsck", name, "--json").stdout)
    assert rep["clean"] and rep["objects_live"] == 1
    r = run("rm", name, "a", "ghost", "--json")
    assert r.exit_code == 2
    out = json.loads(r.stdout)
    assert out["destroyed"] == ["a"] and "ghost" in out["errors"]
    assert json.loads(run("ls", "--pools", "--json").stdout).count(f"/dev/shm/{name}") == 1
    assert run("rm", name).exit_code == 0
    assert not Path(f"/dev/shm/{name}").exists()


def test_tables_for_people(name):
    assert run("create", name, "--size", "16M").exit_code == 0
    r = run("stat", name)
    assert r.exit_code == 0 and "data region" in r.stdout
    assert "0 object(s)" in run("ls", name).stdout
    assert "clean" in run("fsck", name, "--no-repair").stdout


def test_errors_exit_2_with_the_reason(name):
    r = run("stat", name)
    assert r.exit_code == 2 and name in r.output
    r = run("create", name, "--size", "lots")
    assert r.exit_code == 2 and "size" in r.output
    Path(f"/dev/shm/{name}").write_bytes(b"x" * 8192)
    r = run("fsck", name)
    assert r.exit_code == 2 and "not a cxlkit pool" in r.output


def test_run_demo_shares_an_object_between_two_processes(name, monkeypatch):
    monkeypatch.setenv("CXLKIT_POOL", name)
    monkeypatch.delenv("CXLKIT_HOST_ID")
    con = Console(record=True, width=200)
    run_demo(con)
    text = con.export_text()
    assert "open + verify + sum in a second process" in text
    assert "clean" in text and "failed" not in text
    with cxlkit.Pool(name) as p:
        assert p.list() == []
    assert f"the pool /dev/shm/{name} (made by this demo) stays" in text
    assert f"cxlkit pool rm /dev/shm/{name}" in text


def test_run_demo_interrupted_removes_the_pool_it_made(name, monkeypatch):
    from cxlkit.cli import pool as cli_pool

    monkeypatch.setenv("CXLKIT_POOL", name)

    def interrupted(console, path):
        cxlkit.Pool(path, size="4M").close()
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_pool, "_pool_demo", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_demo(Console(record=True))
    assert not Path(f"/dev/shm/{name}").exists()


# ---- paths under /dev, sizes, geometry of an existing pool ----------------------------------

def test_create_of_a_missing_dax_device_is_an_error_listing_those_present():
    dev = Path("/dev/dax97.3")
    assert not dev.exists()
    try:
        r = run("create", str(dev), "--size", "64M")
        assert r.exit_code == 2, r.output
        assert "dax97.3" in r.output and "dax devices present" in r.output
        assert "Traceback" not in r.output
    finally:
        if dev.is_file():
            dev.unlink()
    assert not dev.exists()


def test_a_file_path_directly_under_dev_must_be_an_existing_device():
    dev = Path(f"/dev/cxlkit-test-{uuid.uuid4().hex[:8]}")
    try:
        with pytest.raises(FileNotFoundError, match="not a device"):
            cxlkit.Pool(str(dev), size=8 << 20, host_id=0)
    finally:
        if dev.is_file():
            dev.unlink()
    assert not dev.exists()


def test_create_with_size_0_names_the_size(name):
    r = run("create", name, "--size", "0")
    assert r.exit_code == 2 and "size 0" in r.output and "geometry" not in r.output


def test_existing_pool_opened_with_another_size_or_max_hosts_is_refused(name):
    assert run("create", name, "--size", "16M", "--max-hosts", "2").exit_code == 0
    r = run("create", name, "--size", "32M")
    assert r.exit_code == 2 and "16 MiB" in r.output and "--size 32 MiB" in r.output
    r = run("create", name, "--size", "16M", "--max-hosts", "4")
    assert r.exit_code == 2 and "--max-hosts 2" in r.output
    with pytest.raises(cxlkit.PoolGeometryError, match="max_hosts"):
        cxlkit.Pool(name, size="16M", max_hosts=3)
    with cxlkit.Pool(name, size="16M", max_hosts=2) as p:  # the same geometry: opened
        assert p.stat().size == 16 << 20


def test_hosts_shows_a_host_whose_process_exited_as_exited_not_live(name):
    import subprocess
    import sys

    assert run("create", name, "--size", "16M").exit_code == 0
    prog = (f"import os, cxlkit; p = cxlkit.Pool({name!r}, host_id=1); "
            "print(os.getpid(), flush=True); os._exit(0)")
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=60)
    pid = int(r.stdout)
    rows = json.loads(run("hosts", name, "--host-id", "0", "--json").stdout)
    (gone,) = [h for h in rows if h["slot"] == 1]
    assert gone["pid"] == pid and gone["state"] == "exited"
    (me,) = [h for h in rows if h["slot"] == 0]
    assert me["state"] == "live"


def test_run_demo_interrupted_in_an_existing_pool_leaves_no_object(name, monkeypatch):
    from cxlkit.cli import pool as cli_pool

    monkeypatch.setenv("CXLKIT_POOL", name)
    cxlkit.Pool(name, size="64M").close()

    def interrupted(console, pool, path, obj_name):
        pool.create(obj_name, 4096).close()  # made, not yet published
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_pool, "_share", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_demo(Console(record=True))
    with cxlkit.Pool(name) as p:
        assert p.list() == []


def test_run_demo_is_not_stopped_by_another_hosts_demo_object(name, monkeypatch):
    monkeypatch.setenv("CXLKIT_POOL", name)
    with cxlkit.Pool(name, size="64M", host_id=3) as other:
        other.create("demo/matrix", data=b"x").close()
        other.create(f"demo/matrix.h{other.host_id}", data=b"x").close()
        con = Console(record=True, width=200)
        run_demo(con)
    assert "open + verify + sum in a second process" in con.export_text()

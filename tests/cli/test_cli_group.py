"""A group-shared pool (`cxlkit pool create NAME --group G`, mode 0660) is usable from every
pool command and `kv stats`: by its owner and members of its group without a flag, by anyone
else with --group naming the group; errors name --group."""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

import cxlkit
from cxlkit.cli.main import run
from cxlkit.cli.poolopen import group_name


@pytest.fixture
def shared_pool(monkeypatch):
    """A real group-writable pool file of this user and its own group, with one object."""
    monkeypatch.setenv("CXLKIT_HOST_ID", "0")
    path = f"/dev/shm/cxlkit-test-cli-group-{uuid.uuid4().hex[:10]}"
    with cxlkit.Pool(path, "4M", group=os.getegid()) as p:
        p.create("a", data=b"1234").close()
    assert os.stat(path).st_mode & 0o777 == 0o660
    yield path
    Path(path).unlink(missing_ok=True)


def cli(capsys, *args):
    code = run(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("cmd", [["pool", "stat"], ["pool", "ls"], ["pool", "hosts"],
                                 ["pool", "fsck"], ["kv", "stats"]])
def test_the_owner_uses_a_group_shared_pool_without_a_flag(capsys, shared_pool, cmd):
    code, out, err = cli(capsys, *cmd, shared_pool, "--json")
    assert code == 0, err
    json.loads(out)


def test_the_owner_destroys_an_object_of_a_group_shared_pool(capsys, shared_pool):
    code, _, err = cli(capsys, "pool", "rm", shared_pool, "a")
    assert code == 0, err
    with cxlkit.Pool(shared_pool, group=os.getegid()) as p:
        assert "a" not in p


def test_create_of_an_existing_group_shared_pool_opens_it(capsys, shared_pool):
    code, out, err = cli(capsys, "pool", "create", shared_pool, "--size", "4M", "--json")
    assert code == 0, err
    assert json.loads(out)["objects"] == 1


def test_group_names_another_group_than_the_pools(capsys, shared_pool):
    other = "0" if os.getegid() != 0 else "65534"
    code, _, err = cli(capsys, "pool", "stat", shared_pool, "--group", other)
    assert code == 2
    assert f"pass --group {group_name(os.getegid())}" in err and "[Errno" not in err


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the file to another owner needs root")
def test_a_pool_of_a_group_this_user_is_not_in_needs_group(capsys, shared_pool):
    os.chown(shared_pool, 65534, 65534)
    if 65534 in {os.getegid(), *os.getgroups()}:
        pytest.skip("this user is in group 65534")
    code, _, err = cli(capsys, "pool", "stat", shared_pool)
    assert code == 2
    assert f"pass --group {group_name(65534)}" in err
    assert len(err.strip().splitlines()) == 1
    code, out, err = cli(capsys, "pool", "stat", shared_pool, "--group", "65534", "--json")
    assert code == 0, err
    assert json.loads(out)["objects"] == 1

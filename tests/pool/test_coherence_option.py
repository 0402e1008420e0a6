"""How a pool is opened — coherence "host" or "none" — is chosen the same way everywhere:
the coherence= argument, else CXLKIT_COHERENCE, else "host"; the pool commands take
--coherence (docs/deploy.md: hosts behind a CXL switch open with none)."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import cxlkit
from cxlkit.cli.main import _load, app


@pytest.fixture
def pool_path(tmp_path):
    return str(tmp_path / "cxlkit-coh")


def test_pool_coherence_defaults_to_host_and_follows_CXLKIT_COHERENCE(pool_path, monkeypatch):
    monkeypatch.delenv("CXLKIT_COHERENCE", raising=False)
    with cxlkit.Pool(pool_path, size="8M") as p:
        assert p.coherence == "host"
        assert p.stat().coherence == "host"
    monkeypatch.setenv("CXLKIT_COHERENCE", "none")
    with cxlkit.Pool(pool_path) as p:
        assert p.coherence == "none"
        assert p.stat().coherence == "none"
    with cxlkit.Pool(pool_path, coherence="host") as p:
        assert p.stat().coherence == "host"


def test_a_bad_CXLKIT_COHERENCE_is_a_ValueError_naming_it(pool_path, monkeypatch):
    monkeypatch.setenv("CXLKIT_COHERENCE", "sometimes")
    with pytest.raises(ValueError, match="coherence 'sometimes'"):
        cxlkit.Pool(pool_path, size="8M")


@pytest.mark.parametrize("cmd", [["create", "--size", "8M"], ["stat"], ["ls"], ["fsck"]])
def test_pool_commands_take_coherence_none(pool_path, cmd, monkeypatch):
    monkeypatch.delenv("CXLKIT_COHERENCE", raising=False)
    _load()
    if cmd[0] != "create":
        cxlkit.Pool(pool_path, size="8M").close()
    r = CliRunner().invoke(app, ["pool", cmd[0], pool_path, *cmd[1:], "--coherence", "none",
                                 "--json"])
    assert r.exit_code == 0, r.output
    if cmd[0] in ("create", "stat"):
        assert json.loads(r.output)["coherence"] == "none"


def test_pool_command_with_a_bad_coherence_fails_in_one_line(pool_path):
    _load()
    r = CliRunner().invoke(app, ["pool", "create", pool_path, "--coherence", "maybe"])
    assert r.exit_code == 2
    assert "coherence 'maybe'" in r.output


def test_kv_stats_takes_host_id_and_coherence(pool_path, monkeypatch):
    monkeypatch.delenv("CXLKIT_COHERENCE", raising=False)
    cxlkit.Pool(pool_path, size="8M").close()
    _load()
    r = CliRunner().invoke(app, ["kv", "stats", pool_path, "--host-id", "2", "--coherence",
                                 "none", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["pool"] == pool_path


def test_kv_store_opens_its_pool_with_CXLKIT_COHERENCE(pool_path, monkeypatch):
    from cxlkit.kv.layout import BlockLayout
    from cxlkit.kv.store import Store

    layout = BlockLayout(num_layers=2, num_kv_heads=2, head_dim=16, dtype="float32",
                         block_tokens=16)
    monkeypatch.setenv("CXLKIT_COHERENCE", "none")
    s = Store(pool_path, layout, create=True, size="16M")
    try:
        assert s.pool.coherence == "none"
    finally:
        s.close()


def _recording_pool(monkeypatch):
    """Record how cxlkit.pool.Pool is called (spill paths import it when they open a pool)."""
    import cxlkit.pool as P

    seen, real = [], P.Pool

    def rec(*a, **kw):
        seen.append(kw)
        return real(*a, **kw)
    monkeypatch.setattr(P, "Pool", rec)
    return seen


def test_plan_train_spill_opens_pool_paths_with_host_id_and_coherence(pool_path, monkeypatch):
    monkeypatch.delenv("CXLKIT_COHERENCE", raising=False)
    cxlkit.Pool(pool_path, size="512M", max_hosts=2, coherence="none").close()  # 64 MiB probe
    seen = _recording_pool(monkeypatch)
    _load()
    r = CliRunner().invoke(app, ["plan", "train", "--params", "1B", "--layers", "16", "--hidden",
                                 "2048", "--context", "2k", "--spill", f"pool:{pool_path}",
                                 "--host-cache", "4G", "--host-id", "1", "--coherence", "none",
                                 "--json"])
    assert r.exit_code == 0, r.output
    assert seen == [{"host_id": 1, "coherence": "none"}]
    assert json.loads(r.output)["spill"]["paths"][0]["path"].startswith(f"pool:{pool_path}")


def test_train_demo_with_a_bad_coherence_fails_in_one_line(pool_path, monkeypatch):
    cxlkit.Pool(pool_path, size="64M").close()
    _load()
    r = CliRunner().invoke(app, ["train", "demo", "--spill", f"pool:{pool_path}",
                                 "--coherence", "maybe"])
    assert r.exit_code == 2
    assert "coherence 'maybe'" in r.output and "Traceback" not in r.output


def test_subgroup_store_passes_pool_options_to_pool_paths(pool_path, monkeypatch):
    from cxlkit.train import SubgroupStore

    cxlkit.Pool(pool_path, size="64M", coherence="none").close()
    seen = _recording_pool(monkeypatch)
    store = SubgroupStore([f"pool:{pool_path}"], subgroup_params=10_000, cache_subgroups=3,
                          bandwidths=[1e9], pool_options={"host_id": 1, "coherence": "none"})
    try:
        assert seen == [{"host_id": 1, "coherence": "none"}]
        assert store.paths[0].pool.coherence == "none"
    finally:
        store.close()

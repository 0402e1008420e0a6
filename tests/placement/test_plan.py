"""plan: vector-database and KV-cache sizing, and which tiers (free memory per node) hold it;
the `cxlkit plan` commands."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cxlkit import sizing as PL
from cxlkit import topology

GiB = 1 << 30
# (node, kind, total, free): a DRAM node and a larger CXL node
TIERS = [(0, "dram", 64 * GiB, 40 * GiB), (1, "cxl", 256 * GiB, 200 * GiB)]


@pytest.mark.parametrize("text, n", [("100M", 100_000_000), ("1M", 1_000_000), ("8k", 8000),
                                     ("1.5K", 1500), ("64Ki", 65536), ("2Mi", 2 << 20),
                                     ("3", 3), (42, 42), ("1B", 10**9), (" 2 G ", 2 * 10**9)])
def test_counts_are_decimal_with_binary_suffixes_as_powers_of_two(text, n):
    assert PL.parse_count(text) == n


@pytest.mark.parametrize("text", ["", "M", "1.5", "0", "-3", "10X", "0.1k1"])
def test_bad_counts_raise_ValueError_naming_the_parameter(text):
    with pytest.raises(ValueError, match="tokens"):
        PL.parse_count(text, "tokens")


def test_a_bool_count_raises_TypeError():
    with pytest.raises(TypeError):
        PL.parse_count(True)


def test_vectordb_of_the_issue_needs_460_8_GB():
    # 100M x 768 x 4 bytes = 307.2 GB raw, x1.5
    assert PL.vectordb_bytes(100_000_000, 768, "fp32", 1.5) == 460_800_000_000
    assert PL.vectordb_bytes(1000, 128, "binary", 1.0) == 16_000
    assert PL.vectordb_bytes(3, 3, "int4", 1.0) == 5  # 36 bits round up to 5 bytes


def test_kv_of_the_issue_needs_256_KiB_per_token():
    # 2 x 64 layers x 8 kv heads x 128 x 2 bytes
    assert PL.kv_bytes_per_token(64, 8, 128, "bf16") == 262_144
    p = PL.kv(64, 8, 128, "1M", "bf16", tiers=TIERS)  # token counts are binary: 1M = 2**20
    assert p.need_bytes == 262_144 << 20
    assert p.detail["bytes_per_token"] == 262_144 and p.detail["tokens"] == 1 << 20


def test_a_need_that_fits_one_tier_names_it():
    p = PL.kv(32, 8, 128, "100k", "bf16", tiers=TIERS)  # 13.1 GB
    assert p.fitting_nodes == [0, 1] and p.fits_all
    assert p.verdict().startswith("fits on node 0 (dram), 1 (cxl)")


def test_a_need_that_fits_only_across_tiers_says_interleave():
    big = PL.fit("kv", 220 * GiB, {}, TIERS)  # over each node's free, under their 240 GiB sum
    p = PL.vectordb("100M", 768, "fp32", 1.5, tiers=TIERS)  # 429.2 GiB: over the sum too
    assert big.fitting_nodes == [] and big.fits_all
    assert "across all nodes" in big.verdict() and "0,1" in big.verdict()
    assert not p.fits_all and p.verdict().startswith("does not fit: needs 429.2 GiB")


def test_a_tier_with_unknown_free_memory_never_fits():
    p = PL.fit("kv", 1, {}, [(0, "dram", None, None)])
    assert p.tiers[0].fits is False and p.tiers[0].share is None and not p.fits_all


@pytest.mark.parametrize("call, exc, match", [
    (lambda: PL.vectordb_bytes(10, 8, "fp13"), KeyError, "dtype 'fp13'"),
    (lambda: PL.vectordb_bytes(10, 8, "fp32", 0.5), ValueError, "overhead"),
    (lambda: PL.vectordb_bytes(10, 0), ValueError, "dim 0"),
    (lambda: PL.kv_bytes_per_token(0, 8, 128), ValueError, "layers 0"),
    (lambda: PL.kv_bytes_per_token(2, 8.0, 128), TypeError, "kv_heads"),
    (lambda: PL.kv(2, 8, 128, "1k", nodes=[99]), ValueError, "node 99"),
])
def test_bad_input_raises_typed_errors_naming_the_parameter(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_this_machines_tiers_have_free_memory():
    tiers = PL.tiers_free()
    assert [t[0] for t in tiers] == topology.memory_nodes()
    assert all(t[3] is None or 0 < t[3] <= t[2] for t in tiers)
    d = PL.kv(2, 2, 64, "1k", tiers=tiers).to_dict()
    assert d["verdict"].startswith("fits on node") and json.dumps(d)


@pytest.fixture
def cli():
    from cxlkit.cli.main import app
    import cxlkit.cli.plan  # noqa: F401  (registers `plan`)

    return lambda *args: CliRunner().invoke(app, list(args))


def test_cli_plan_vectordb_prints_the_need_and_each_tier(cli):
    r = cli("plan", "vectordb", "--vectors", "100M", "--dim", "768", "--dtype", "fp32",
            "--overhead", "1.5")
    assert r.exit_code == 0, r.output
    assert "460,800,000,000 bytes" in r.output and "does not fit" in r.output


def test_cli_plan_kv_json_is_the_plan(cli):
    r = cli("plan", "kv", "--layers", "64", "--kv-heads", "8", "--head-dim", "128",
            "--tokens", "1M", "--dtype", "bf16", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["need_bytes"] == 256 << 30 and d["what"] == "kv"
    assert [t["node"] for t in d["tiers"]] == topology.memory_nodes()


def test_cli_plan_with_a_bad_dtype_exits_2_naming_it(cli):
    r = cli("plan", "kv", "--layers", "2", "--kv-heads", "2", "--head-dim", "2", "--tokens", "9",
            "--dtype", "bf17")
    assert r.exit_code == 2 and "bf17" in r.output

"""One parser of sizes and counts: bytes and tokens in powers of two,
other counts decimal; `--context 32k` and `--tokens 32k` agree; alloc("1G") works like
Pool(size="16M")."""
import json

import pytest
from typer.testing import CliRunner

import cxlkit
from cxlkit import placement as P
from cxlkit.units import parse_count, parse_size


@pytest.mark.parametrize("text,n", [("64M", 64 << 20), ("2MiB", 2 << 20), ("64KB", 64 << 10),
                                    ("1.5G", 3 << 29), (" 4096 ", 4096), (4096, 4096),
                                    ("1T", 1 << 40), ("8k", 8192)])
def test_sizes_are_bytes_in_powers_of_1024(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("text", ["", "M", "1.5", "10X", "-3", "1.5k1"])
def test_bad_sizes_raise_ValueError_naming_the_option(text):
    with pytest.raises(ValueError, match="chunk"):
        parse_size(text, "chunk")


@pytest.mark.parametrize("bad", [True, 1.5, None, b"1G"])
def test_sizes_of_another_type_raise_TypeError(bad):
    with pytest.raises(TypeError):
        parse_size(bad)


def test_tokens_are_powers_of_two_and_other_counts_decimal():
    assert parse_count("32k", "tokens", tokens=True) == 32768
    assert parse_count("1M", "tokens", tokens=True) == 1 << 20
    assert parse_count("1.5k", "tokens", tokens=True) == 1536
    assert parse_count("100M", "vectors") == 10**8
    assert parse_count("7B", "params") == parse_count("7e9", "params") == 7 * 10**9
    assert parse_count("64Ki") == 65536
    with pytest.raises(ValueError, match="billion"):
        parse_count("1B", "tokens", tokens=True)
    with pytest.raises(ValueError, match="tokens"):
        parse_count("0", "tokens", tokens=True)


def test_context_and_tokens_options_read_32k_alike():
    from cxlkit.cli.main import _load, app

    _load()
    r = CliRunner().invoke(app, ["plan", "kv", "--layers", "1", "--kv-heads", "1", "--head-dim",
                                 "1", "--tokens", "32k", "--dtype", "int8", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["detail"]["tokens"] == 32768
    r = CliRunner().invoke(app, ["plan", "train", "--params", "1e6", "--layers", "2",
                                 "--hidden", "64", "--context", "32k", "--batch", "1", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert (d[0] if isinstance(d, list) else d)["footprint"]["context"] == 32768


def test_alloc_takes_a_size_string_like_Pool():
    with cxlkit.alloc("1M", P.bind(0)) as buf:
        assert buf.nbytes == 1 << 20
    with pytest.raises(ValueError, match="nbytes"):
        cxlkit.alloc("1Q", P.bind(0))
    with pytest.raises(TypeError, match="nbytes"):
        cxlkit.alloc(1.0, P.bind(0))

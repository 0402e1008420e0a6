"""cxlkit.kv.block_hashes against vectors built from vLLM's definition by hand: the pickle and
CBOR byte streams are assembled here from their specs, not by pickle/cbor2."""
import hashlib
import os
import subprocess
import sys

import pytest

from cxlkit.kv import block_hashes
from cxlkit.kv.hashing import cbor_canonical, none_hash


# -- a pickle protocol-5 writer for exactly the shapes vLLM hashes (PEP 3154 / pickletools) ----
def _p_int(v):
    if 0 <= v < 0x100:
        return b"K" + bytes([v])                      # BININT1
    if 0 <= v < 0x10000:
        return b"M" + v.to_bytes(2, "little")         # BININT2
    return b"J" + v.to_bytes(4, "little", signed=True)  # BININT


def _p_str(s):
    raw = s.encode()
    return b"\x8c" + bytes([len(raw)]) + raw + b"\x94"  # SHORT_BINUNICODE, MEMOIZE


def _p_tuple(items):
    body = b"".join(items)
    if len(items) == 1:
        return body + b"\x85\x94"                     # TUPLE1, MEMOIZE
    if len(items) == 3:
        return body + b"\x87\x94"                     # TUPLE3
    return b"(" + body + b"t\x94"                     # MARK ... TUPLE


def _p_frame(payload):
    payload += b"."                                   # STOP
    return b"\x80\x05\x95" + len(payload).to_bytes(8, "little") + payload  # PROTO 5, FRAME


def _vllm_sha256(parent, tokens, extra_strs=None):
    parts = [b"C" + bytes([len(parent)]) + parent + b"\x94",   # SHORT_BINBYTES
             _p_tuple([_p_int(t) for t in tokens]),
             b"N" if extra_strs is None else _p_tuple([_p_str(s) for s in extra_strs])]
    return hashlib.sha256(_p_frame(_p_tuple(parts))).digest()


NONE_HASH_0 = hashlib.sha256(_p_frame(_p_str("0"))).digest()


def test_none_hash_is_sha256_of_the_pickled_seed():
    assert none_hash("sha256", "0") == NONE_HASH_0
    assert none_hash("sha256", "1234") == hashlib.sha256(_p_frame(_p_str("1234"))).digest()


def test_block_hashes_chain_matches_hand_built_pickle_vectors():
    tokens = [1, 300, 70000] + list(range(100, 113)) + list(range(128000, 128016)) + [5, 6]
    keys = block_hashes(tokens)  # 2 full blocks; the 2 trailing tokens make no key
    assert len(keys) == 2
    k0 = _vllm_sha256(NONE_HASH_0, tokens[:16])
    k1 = _vllm_sha256(k0, tokens[16:32])
    assert keys == [k0, k1]


def test_block_hashes_with_extra_keys_matches_hand_built_vector():
    tokens = list(range(16))
    assert block_hashes(tokens, extra_keys=("lora-a",)) == [
        _vllm_sha256(NONE_HASH_0, tokens, ["lora-a"])]
    per_block = block_hashes(tokens * 2, extra_keys=[("salt",), None])
    k0 = _vllm_sha256(NONE_HASH_0, tokens, ["salt"])
    assert per_block == [k0, _vllm_sha256(k0, tokens)]


def test_parent_continues_a_chain():
    tokens = list(range(64))
    keys = block_hashes(tokens)
    assert block_hashes(tokens[32:], parent=keys[1]) == keys[2:]


def test_block_size_other_than_16():
    tokens = list(range(8))
    assert block_hashes(tokens, block_size=4) == [
        _vllm_sha256(NONE_HASH_0, tokens[:4]),
        _vllm_sha256(_vllm_sha256(NONE_HASH_0, tokens[:4]), tokens[4:])]


def test_numpy_and_torch_token_ids_hash_like_ints():
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    tokens = list(range(40))
    assert block_hashes(np.array(tokens)) == block_hashes(tokens)
    assert block_hashes(torch.tensor(tokens)) == block_hashes(tokens)


def test_keys_do_not_depend_on_PYTHONHASHSEED():
    code = "from cxlkit.kv import block_hashes; print(block_hashes(list(range(48)))[-1].hex())"
    outs = set()
    for seed in ("random", "7", "123"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                capture_output=True, text=True).stdout.strip())
    assert outs == {block_hashes(list(range(48)))[-1].hex()}


# -- canonical CBOR: RFC 8949 appendix A examples -------------------------------------------
@pytest.mark.parametrize("value,hexenc", [
    (0, "00"), (23, "17"), (24, "1818"), (100, "1864"), (1000, "1903e8"),
    (1000000, "1a000f4240"), (1000000000000, "1b000000e8d4a51000"),
    (18446744073709551616, "c249010000000000000000"), (-1, "20"), (-1000, "3903e7"),
    (-18446744073709551617, "c349010000000000000000"), (1.5, "f93e00"),
    (100000.0, "fa47c35000"), (1.1, "fb3ff199999999999a"), ("a", "6161"),
    ("IETF", "6449455446"), ([1, [2, 3], [4, 5]], "8301820203820405"),
    ({"a": 1, "b": [2, 3]}, "a26161016162820203"), (b"\x01\x02\x03\x04", "4401020304"),
    (None, "f6"), (True, "f5"), ({"aa": 2, "b": 1}, "a2616201626161" + "02"),
])
def test_cbor_canonical_matches_rfc8949_examples(value, hexenc):
    assert cbor_canonical(value).hex() == hexenc


def test_sha256_cbor_block_hash_matches_hand_built_cbor():
    tokens = list(range(16))
    seed_hash = hashlib.sha256(bytes.fromhex("6130")).digest()  # cbor("0") = 61 30
    body = bytes.fromhex("83") + bytes([0x58, 32]) + seed_hash + bytes([0x90]) + bytes(
        range(16)) + b"\xf6"
    assert block_hashes(tokens, hash_algo="sha256_cbor") == [hashlib.sha256(body).digest()]


@pytest.mark.parametrize("kwargs,exc", [
    (dict(block_size=0), ValueError), (dict(block_size=True), ValueError),
    (dict(hash_algo="md5"), ValueError), (dict(extra_keys="lora"), TypeError),
    (dict(extra_keys=[None]), ValueError), (dict(parent="abc"), TypeError),
    (dict(seed=0), TypeError),
])
def test_bad_arguments_raise_typed_errors(kwargs, exc):
    with pytest.raises(exc):
        block_hashes(list(range(32)), **kwargs)


def test_non_integer_tokens_raise_TypeError():
    with pytest.raises(TypeError, match="token_ids"):
        block_hashes([0.5] * 16)
    with pytest.raises(TypeError, match="extra_keys"):
        block_hashes(list(range(16)), extra_keys=[["not-a-tuple"]])
    with pytest.raises(TypeError, match="sha256_cbor"):
        block_hashes(list(range(16)), extra_keys=(object(),), hash_algo="sha256_cbor")

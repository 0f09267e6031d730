"""RFC 9162 §2.1 Merkle maths: known answers, an independent reference, and tampering."""

from __future__ import annotations

import hashlib
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evidence import merkle
from evidence.errors import EvidenceError

# Certificate Transparency's reference test data (the C++ and Go implementations' merkle tests):
# eight leaves, the root of each prefix, and some inclusion and consistency proofs.
CT_LEAVES = [
    b"",
    b"\x00",
    b"\x10",
    b"\x20\x21",
    b"\x30\x31",
    b"\x40\x41\x42\x43",
    bytes(range(0x50, 0x58)),
    bytes(range(0x60, 0x70)),
]
CT_ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
H96, H5F, H6B = (
    "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
    "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
)
HBC, HCA = (
    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
)
CT_INCLUSION = [  # (index, size, path)
    (0, 1, []),
    (0, 8, [H96, H5F, H6B]),
    (5, 8, [HBC, HCA, CT_ROOTS[3]]),
    (2, 3, [CT_ROOTS[1]]),
    (1, 5, [CT_ROOTS[0], H5F, HBC]),
]
CT_CONSISTENCY = [  # (old, new, proof)
    (1, 1, []),
    (1, 8, [H96, H5F, H6B]),
    (6, 8, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a", HCA, CT_ROOTS[3]]),
    (2, 5, [H5F, HBC]),
]
CT_HASHES = [merkle.leaf_hash(leaf) for leaf in CT_LEAVES]


# An independent implementation, straight from the RFC's recursive definitions.
def ref_mth(d: list[bytes]) -> bytes:
    n = len(d)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return d[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return hashlib.sha256(b"\x01" + ref_mth(d[:k]) + ref_mth(d[k:])).digest()


def ref_path(m: int, d: list[bytes]) -> list[bytes]:
    n = len(d)
    if n == 1:
        return []
    k = 1
    while k * 2 < n:
        k *= 2
    if m < k:
        return [*ref_path(m, d[:k]), ref_mth(d[k:])]
    return [*ref_path(m - k, d[k:]), ref_mth(d[:k])]


def ref_subproof(m: int, d: list[bytes], whole: bool) -> list[bytes]:
    n = len(d)
    if m == n:
        return [] if whole else [ref_mth(d)]
    k = 1
    while k * 2 < n:
        k *= 2
    if m <= k:
        return [*ref_subproof(m, d[:k], whole), ref_mth(d[k:])]
    return [*ref_subproof(m - k, d[k:], False), ref_mth(d[:k])]


def hashes(n: int) -> list[bytes]:
    return [merkle.leaf_hash(b"entry %d" % i) for i in range(n)]


def over(leaves: list[bytes]) -> merkle.Subtree:
    return lambda start, end: merkle.root(leaves[start:end])


def flip(data: bytes, position: int, bit: int) -> bytes:
    i = position % len(data)
    return data[:i] + bytes([data[i] ^ (1 << bit)]) + data[i + 1 :]


def test_hashing_is_rfc_9162() -> None:
    assert merkle.EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert merkle.root([]) == merkle.EMPTY_ROOT
    assert merkle.leaf_hash(b"") == hashlib.sha256(b"\x00").digest()
    assert merkle.node_hash(b"L" * 32, b"R" * 32) == hashlib.sha256(b"\x01" + b"L" * 32 + b"R" * 32).digest()


def test_certificate_transparency_roots() -> None:
    for n, expected in enumerate(CT_ROOTS, start=1):
        assert merkle.root(CT_HASHES[:n]).hex() == expected, n


@pytest.mark.parametrize(("index", "size", "path"), CT_INCLUSION)
def test_certificate_transparency_inclusion(index: int, size: int, path: list[str]) -> None:
    proof = merkle.inclusion_proof(index, size, over(CT_HASHES[:size]))
    assert [p.hex() for p in proof] == path
    merkle.verify_inclusion(CT_HASHES[index], index, size, proof, bytes.fromhex(CT_ROOTS[size - 1]))


@pytest.mark.parametrize(("old", "new", "path"), CT_CONSISTENCY)
def test_certificate_transparency_consistency(old: int, new: int, path: list[str]) -> None:
    proof = merkle.consistency_proof(old, new, over(CT_HASHES[:new]))
    assert [p.hex() for p in proof] == path
    old_root, new_root = (bytes.fromhex(CT_ROOTS[size - 1]) for size in (old, new))
    merkle.verify_consistency(old, new, old_root, new_root, proof)


def test_every_proof_up_to_70_leaves_matches_the_reference_and_verifies() -> None:
    leaves = hashes(70)
    for n in range(1, 71):
        d = leaves[:n]
        tree_root = ref_mth(d)
        assert merkle.root(d) == tree_root
        subtree = over(d)
        depth = math.ceil(math.log2(n))
        for m in range(n):
            proof = merkle.inclusion_proof(m, n, subtree)
            assert proof == ref_path(m, d)
            assert len(proof) <= depth
            merkle.verify_inclusion(d[m], m, n, proof, tree_root)
        for m in range(1, n + 1):
            proof = merkle.consistency_proof(m, n, subtree)
            assert proof == ref_subproof(m, d, True)
            assert len(proof) <= 2 * depth
            merkle.verify_consistency(m, n, ref_mth(d[:m]), tree_root, proof)


def test_perfect_subtrees_cover_the_tree() -> None:
    assert merkle.perfect_subtrees(0) == []
    assert merkle.perfect_subtrees(1) == [(0, 1)]
    assert merkle.perfect_subtrees(13) == [(0, 8), (8, 12), (12, 13)]
    assert merkle.perfect_subtrees(64) == [(0, 64)]
    leaves = hashes(45)
    for n in range(1, 46):
        parts = [merkle.root(leaves[s:e]) for s, e in merkle.perfect_subtrees(n)]
        folded = parts[-1]
        for h in reversed(parts[:-1]):
            folded = merkle.node_hash(h, folded)
        assert folded == merkle.root(leaves[:n])


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 70).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))),
    st.integers(0, 10_000),
    st.integers(0, 7),
    st.sampled_from(["proof", "leaf", "root"]),
)
def test_inclusion_fails_on_any_flipped_bit(sized: tuple[int, int], where: int, bit: int, part: str) -> None:
    n, m = sized
    leaves = hashes(n)
    proof = merkle.inclusion_proof(m, n, over(leaves))
    leaf, tree_root = leaves[m], merkle.root(leaves)
    if part == "proof":
        if not proof:
            return
        i = where % len(proof)
        proof[i] = flip(proof[i], where // len(proof), bit)
    elif part == "leaf":
        leaf = flip(leaf, where, bit)
    else:
        tree_root = flip(tree_root, where, bit)
    with pytest.raises(EvidenceError) as failed:
        merkle.verify_inclusion(leaf, m, n, proof, tree_root)
    assert failed.value.code == "not-included"


@settings(max_examples=300, deadline=None)
@given(
    st.integers(2, 70).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n - 1))),
    st.integers(0, 10_000),
    st.integers(0, 7),
    st.sampled_from(["proof", "old", "new"]),
)
def test_consistency_fails_on_any_flipped_bit(
    sized: tuple[int, int], where: int, bit: int, part: str
) -> None:
    n, m = sized
    leaves = hashes(n)
    proof = merkle.consistency_proof(m, n, over(leaves))
    old_root, new_root = merkle.root(leaves[:m]), merkle.root(leaves)
    if part == "proof":
        i = where % len(proof)
        proof[i] = flip(proof[i], where // len(proof), bit)
    elif part == "old":
        old_root = flip(old_root, where, bit)
    else:
        new_root = flip(new_root, where, bit)
    with pytest.raises(EvidenceError) as failed:
        merkle.verify_consistency(m, n, old_root, new_root, proof)
    assert failed.value.code == "inconsistent"


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 70), st.integers(1, 70), st.integers(0, 69))
def test_inclusion_proof_for_another_size_fails(n: int, other: int, m: int) -> None:
    if other == n or m >= min(n, other):
        return
    leaves = hashes(max(n, other))
    proof = merkle.inclusion_proof(m, n, over(leaves[:n]))
    with pytest.raises(EvidenceError) as failed:
        merkle.verify_inclusion(leaves[m], m, other, proof, merkle.root(leaves[:other]))
    assert failed.value.code in {"bad-proof", "not-included"}


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 70), st.integers(1, 70), st.integers(1, 70))
def test_consistency_proof_for_other_sizes_fails(m: int, n: int, other: int) -> None:
    if not m <= n or other == n or m > other:
        return
    leaves = hashes(max(n, other))
    proof = merkle.consistency_proof(m, n, over(leaves[:n]))
    with pytest.raises(EvidenceError) as failed:
        merkle.verify_consistency(m, other, merkle.root(leaves[:m]), merkle.root(leaves[:other]), proof)
    assert failed.value.code in {"bad-proof", "inconsistent"}


def test_a_rewritten_old_tree_is_inconsistent() -> None:
    leaves = hashes(20)
    forged = [*leaves[:3], merkle.leaf_hash(b"forged"), *leaves[4:]]
    proof = merkle.consistency_proof(10, 20, over(forged))
    with pytest.raises(EvidenceError) as failed:
        merkle.verify_consistency(10, 20, merkle.root(leaves[:10]), merkle.root(forged), proof)
    assert failed.value.code == "inconsistent"
    assert "changed or removed" in failed.value.message


def test_bad_inputs_are_named() -> None:
    leaves = hashes(5)
    tree_root = merkle.root(leaves)
    proof = merkle.inclusion_proof(1, 5, over(leaves))
    with pytest.raises(EvidenceError, match="not in a tree of size 5") as failed:
        merkle.verify_inclusion(leaves[1], 5, 5, proof, tree_root)
    assert failed.value.code == "bad-proof"
    with pytest.raises(EvidenceError, match="has 3 hashes, not 2") as failed:
        merkle.verify_inclusion(leaves[1], 1, 5, proof[:2], tree_root)
    assert failed.value.code == "bad-proof"
    with pytest.raises(EvidenceError, match="32-byte") as failed:
        merkle.verify_inclusion(b"entry 1", 1, 5, proof, tree_root)  # the entry, not its leaf hash
    assert failed.value.code == "bad-proof"
    with pytest.raises(EvidenceError, match="0 < old size <= new size") as failed:
        merkle.verify_consistency(0, 5, merkle.EMPTY_ROOT, tree_root, [])
    assert failed.value.code == "bad-proof"
    with pytest.raises(EvidenceError, match="same tree size") as failed:
        merkle.verify_consistency(5, 5, tree_root, merkle.root(leaves[:4]), [])
    assert failed.value.code == "inconsistent"
    with pytest.raises(ValueError, match="not in a tree of size 3"):
        merkle.inclusion_proof(3, 3, over(leaves))
    with pytest.raises(ValueError, match="0 < old size <= new size"):
        merkle.consistency_proof(4, 3, over(leaves))

"""RFC 9162 §2.1 Merkle tree maths: hashing, inclusion/consistency proofs and their verification.

Pure functions over SHA-256, so the offline verifier and the Redis log agree on every byte. Proof
builders take a ``subtree(start, end)`` callable instead of a list of leaves: the log answers it from
stored nodes in O(1) reads per call, the tests from a plain list.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from evidence.errors import EvidenceError

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()

Subtree = Callable[[int, int], bytes]
"""subtree(start, end) -> MTH(D[start:end]); a leaf's hash is the MTH of a one-leaf range."""


def leaf_hash(entry: bytes) -> bytes:
    """SHA-256(0x00 || entry): the 0x00 prefix keeps a leaf from passing for an inner node."""
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly smaller than n (n >= 2): where RFC 9162 splits D[n]."""
    return 1 << ((n - 1).bit_length() - 1)


def root(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH over the given leaf hashes (the reference: O(n) time, O(log n) memory)."""
    if not leaf_hashes:
        return EMPTY_ROOT
    stack: list[tuple[int, bytes]] = []  # (height, hash) of complete subtrees, left to right
    for h in leaf_hashes:
        height, current = 0, h
        while stack and stack[-1][0] == height:
            current = node_hash(stack.pop()[1], current)
            height += 1
        stack.append((height, current))
    current = stack.pop()[1]
    while stack:
        current = node_hash(stack.pop()[1], current)
    return current


def perfect_subtrees(size: int) -> list[tuple[int, int]]:
    """The aligned power-of-two ranges covering [0, size), largest (leftmost) first.

    MTH(D[size]) is these subtrees' hashes folded from the right, which is what lets the log append
    from O(log n) stored hashes."""
    if size < 0:
        raise ValueError(f"tree size must be >= 0, not {size}")
    ranges: list[tuple[int, int]] = []
    start = 0
    for bit in range(size.bit_length() - 1, -1, -1):
        width = 1 << bit
        if size & width:
            ranges.append((start, start + width))
            start += width
    return ranges


def inclusion_proof(index: int, size: int, subtree: Subtree) -> list[bytes]:
    """PATH(index, D[size]) of RFC 9162 §2.1.3.1, deepest sibling first."""
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} is not in a tree of size {size}")
    path: list[bytes] = []
    start, end = 0, size
    while end - start > 1:
        k = _split(end - start)
        if index < start + k:
            path.append(subtree(start + k, end))
            end = start + k
        else:
            path.append(subtree(start, start + k))
            start += k
    path.reverse()
    return path


def consistency_proof(old_size: int, new_size: int, subtree: Subtree) -> list[bytes]:
    """PROOF(old_size, D[new_size]) of RFC 9162 §2.1.4.1 (empty when the sizes are equal)."""
    if not 0 < old_size <= new_size:
        raise ValueError(f"a consistency proof needs 0 < old size <= new size, not {old_size} and {new_size}")
    proof: list[bytes] = []
    start, end, m, whole = 0, new_size, old_size, True
    while m != end - start:
        k = _split(end - start)
        if m <= k:
            proof.append(subtree(start + k, end))
            end = start + k
        else:
            proof.append(subtree(start, start + k))
            start += k
            m -= k
            whole = False
    if not whole:
        proof.append(subtree(start, end))
    proof.reverse()
    return proof


def _inclusion_length(index: int, size: int) -> int:
    length, start, end = 0, 0, size
    while end - start > 1:
        k = _split(end - start)
        if index < start + k:
            end = start + k
        else:
            start += k
        length += 1
    return length


def _consistency_length(old_size: int, new_size: int) -> int:
    length, start, end, m, whole = 0, 0, new_size, old_size, True
    while m != end - start:
        k = _split(end - start)
        if m <= k:
            end = start + k
        else:
            start += k
            m -= k
            whole = False
        length += 1
    return length + (0 if whole else 1)


def _check_hashes(what: str, hashes: Sequence[bytes], code: str) -> None:
    for i, h in enumerate(hashes):
        if not isinstance(h, bytes) or len(h) != HASH_SIZE:
            raise EvidenceError(code, f"{what} {i} is not a {HASH_SIZE}-byte SHA-256 hash")


def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> None:
    """Check that ``leaf`` -- a leaf HASH, ``leaf_hash(entry)`` -- is entry ``index`` of the tree
    of ``size`` leaves with ``root`` (RFC 9162 §2.1.3.2). Raises EvidenceError, returns None."""
    if not 0 <= index < size:
        raise EvidenceError("bad-proof", f"leaf index {index} is not in a tree of size {size}")
    _check_hashes("leaf hash", [leaf], "bad-proof")
    _check_hashes("root hash", [root], "bad-proof")
    _check_hashes("inclusion proof hash", proof, "bad-proof")
    expected = _inclusion_length(index, size)
    if len(proof) != expected:
        raise EvidenceError(
            "bad-proof",
            f"an inclusion proof for leaf {index} in a tree of size {size} has {expected} hashes, "
            f"not {len(proof)} (was it made for another tree size?)",
        )
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:  # unreachable after the length check; kept as the RFC's own guard
            raise EvidenceError("bad-proof", "the inclusion proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0 or r != root:
        raise EvidenceError(
            "not-included",
            f"the inclusion proof for leaf {index} does not lead to the root of the tree of size {size}: "
            "the entry, the proof or the root was changed",
        )


def _check_consistency_input(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    if not 0 < old_size <= new_size:
        raise EvidenceError(
            "bad-proof", f"a consistency proof needs 0 < old size <= new size, not {old_size} and {new_size}"
        )
    _check_hashes("old root hash", [old_root], "bad-proof")
    _check_hashes("new root hash", [new_root], "bad-proof")
    _check_hashes("consistency proof hash", proof, "bad-proof")
    expected = _consistency_length(old_size, new_size)
    if len(proof) != expected:
        raise EvidenceError(
            "bad-proof",
            f"a consistency proof from size {old_size} to {new_size} has {expected} hashes, "
            f"not {len(proof)} (was it made for other tree sizes?)",
        )


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Check that the tree of ``new_size`` leaves with ``new_root`` extends the one of ``old_size``
    with ``old_root`` (RFC 9162 §2.1.4.2): nothing already logged was rewritten or removed."""
    _check_consistency_input(old_size, new_size, old_root, new_root, proof)
    if old_size == new_size:
        if old_root != new_root:
            raise EvidenceError(
                "inconsistent",
                f"two different roots for the same tree size {old_size}: the log was rewritten",
            )
        return
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root is itself a node of the new tree
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:  # unreachable after the length check; kept as the RFC's own guard
            raise EvidenceError("bad-proof", "the consistency proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0 or fr != old_root or sr != new_root:
        raise EvidenceError(
            "inconsistent",
            f"the tree of size {new_size} does not extend the tree of size {old_size}: "
            "an entry logged before was changed or removed (or a root or the proof is wrong)",
        )

"""The ClientHello parser on real hellos from Python's TLS client, hand-built ones and random bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.worker.runner.tls import client_hello, extension, hello_message, records, server_name
from worker.runner.proxy_rules import Reason, judge_hello, shown_name
from worker.runner.tls_hello import MAX_BYTES, MAX_RECORDS, Hello, NeedMore, Problem, parse

HELLO = client_hello("allowed.example")
#: The handshake message inside Python's one-record hello.
MESSAGE = HELLO[5:]
#: About the size of a hello with a post-quantum key share (X25519MLKEM768: 1,216 bytes of it).
BIG = hello_message(extension(51, b"\x07" * 1800), server_name(b"allowed.example"))


def test_a_real_hello_names_its_server() -> None:
    assert HELLO[0] == 0x16
    assert parse(HELLO) == Hello(b"allowed.example")
    assert parse(HELLO + b"\x17\x03\x03 early data follows") == Hello(b"allowed.example")


def test_every_truncation_of_a_real_hello_needs_more_and_says_how_much() -> None:
    for cut in range(len(HELLO)):
        found = parse(HELLO[:cut])
        assert isinstance(found, NeedMore), cut
        assert cut < found.total <= len(HELLO)


def test_fed_at_every_split_point_the_hello_is_found_once_complete() -> None:
    """Two TCP reads, and the same hello over two TLS records cut at every byte."""
    for cut in range(1, len(HELLO)):
        assert isinstance(parse(HELLO[:cut]), NeedMore)
        assert parse(HELLO[:cut] + HELLO[cut:]) == Hello(b"allowed.example")
    for cut in range(1, len(MESSAGE)):
        split = records(MESSAGE, [cut])
        assert parse(split) == Hello(b"allowed.example"), cut
        assert all(isinstance(parse(split[:n]), NeedMore) for n in range(0, len(split), 7))


def test_a_post_quantum_sized_hello_over_several_records_and_reads() -> None:
    assert len(BIG) > 1800
    split = records(BIG, [1, 3, 500, 500])
    assert parse(split) == Hello(b"allowed.example")
    need, reads = 0, 0
    for n in range(len(split) + 1):  # what the proxy does: parse again only once `total` is there
        if n < need:
            continue
        reads += 1
        found = parse(split[:n])
        if not isinstance(found, NeedMore):
            break
        need = found.total
    assert (found, n) == (Hello(b"allowed.example"), len(split))
    assert reads <= 2 * 6 + 2  # a header and a body per record, not a parse per byte


def relength(message: bytes) -> bytes:
    """``message`` with its handshake header's length made to fit what follows."""
    return message[:1] + (len(message) - 4).to_bytes(3, "big") + message[4:]


NAMED = server_name(b"a.example")
REFUSED = {
    "one byte of HTTP": (b"G", Problem.NOT_TLS),
    "plain HTTP": (b"GET / HTTP/1.1\r\nHost: allowed.example\r\n\r\n", Problem.NOT_TLS),
    "SSLv2 hello": (b"\x80\x2e\x01\x03\x01", Problem.NOT_TLS),
    "not version 3": (b"\x16\x02", Problem.NOT_TLS),
    "a ServerHello": (records(b"\x02" + MESSAGE[1:]), Problem.NOT_CLIENT_HELLO),
    "zero-length fragment": (b"\x16\x03\x01\x00\x00", Problem.MALFORMED),
    "fragment past 2^14": (b"\x16\x03\x01\x40\x01", Problem.MALFORMED),
    "record version 3.9": (b"\x16\x03\x09\x00\x04", Problem.MALFORMED),
    "an alert in between": (records(MESSAGE[:10]) + b"\x15\x03\x03\x00\x02\x02\x28", Problem.MALFORMED),
    "too many records": (records(MESSAGE, [1] * (MAX_RECORDS + 1)), Problem.MALFORMED),
    "64 KiB announced": (records(b"\x01\x01\x00\x00" + b"\0" * 300, [4]), Problem.TOO_LARGE),
    "no extensions": (records(hello_message(bare=True)), Problem.NO_SNI),
    "no server_name": (records(hello_message(extension(10, b"\0\x02\0\x1d"))), Problem.NO_SNI),
    "two names": (records(hello_message(server_name(b"a.example", b"b.example"))), Problem.MANY_NAMES),
    "two server_name extensions": (
        records(hello_message(server_name(b"a.example"), server_name(b"a.example"))), Problem.MANY_NAMES),
    "another extension twice": (
        records(hello_message(extension(10, b""), extension(10, b""), server_name(b"a"))), Problem.MALFORMED),
    "a name of type 1": (records(hello_message(server_name(b"a.example", name_type=1))), Problem.MALFORMED),
    "an empty name": (records(hello_message(server_name(b""))), Problem.MALFORMED),
    "an empty server_name": (records(hello_message(extension(0, b""))), Problem.MALFORMED),
    "a 33-byte session id": (records(hello_message(NAMED, session=b"\0" * 33)), Problem.MALFORMED),
    "extensions cut short": (records(relength(hello_message(NAMED)[:-1])), Problem.MALFORMED),
    "a byte past them": (records(relength(hello_message(NAMED) + b"\0")), Problem.MALFORMED),
    "no cipher suites": (records(b"\x01\0\0\x24\x03\x03" + b"\0" * 32 + b"\0\0\0"), Problem.MALFORMED),
}  # fmt: skip


@pytest.mark.parametrize("case", REFUSED)
def test_what_is_not_an_acceptable_hello(case: str) -> None:
    data, problem = REFUSED[case]
    assert parse(data) is problem


def test_a_python_client_without_a_server_name_sends_no_sni() -> None:
    assert parse(client_hello(None)) is Problem.NO_SNI


def padded(size: int) -> bytes:
    """A ClientHello message of exactly ``size`` bytes, naming allowed.example."""
    base = len(hello_message(server_name(b"allowed.example"), extension(21, b"")))
    return hello_message(server_name(b"allowed.example"), extension(21, b"\0" * (size - base)))


def test_the_size_bound_counts_the_records_too() -> None:
    assert parse(records(padded(65_000))) == Hello(b"allowed.example")  # 4 records: 65,020 bytes
    assert parse(records(padded(65_500), [2000] * 40)) is Problem.TOO_LARGE  # 33 records: 65,665
    assert parse(records(padded(65_000), [100] * 700)) is Problem.MALFORMED  # 650 records
    # Decided on what was announced, before the rest arrives: no waiting for 64 KiB that will not do.
    assert parse(records(padded(65_600))[:8]) == NeedMore(9)
    assert parse(records(padded(65_600))[:9]) is Problem.TOO_LARGE
    assert parse(records(padded(65_500), [2000] * 40)[: 32 * 2005 + 5]) is Problem.TOO_LARGE


@pytest.mark.parametrize(
    ("host", "name", "verdict"),
    [
        ("allowed.example", b"allowed.example", None),
        ("allowed.example", b"Allowed.EXAMPLE.", None),
        ("allowed.example", b"other.example", Reason.SNI_MISMATCH),
        ("allowed.example", b"allowed.example\0.other.example", Reason.SNI_MISMATCH),
        ("allowed.example", b"allowed.example.other.example", Reason.SNI_MISMATCH),
        ("xn--bcher-kva.example", b"xn--bcher-kva.example", None),
        ("xn--bcher-kva.example", "bücher.example".encode(), Reason.SNI_MISMATCH),  # U-labels: not as sent
        ("allowed.example", b"\xff\xfe", Reason.SNI_MISMATCH),
    ],
)
def test_names_compare_as_host_names_do(host: str, name: bytes, verdict: Reason | None) -> None:
    assert judge_hello(host, Hello(name)) is verdict


def test_an_idn_from_pythons_client_is_sent_as_its_a_label() -> None:
    found = parse(client_hello("bücher.example"))
    assert found == Hello(b"xn--bcher-kva.example")
    assert isinstance(found, Hello)
    assert judge_hello("xn--bcher-kva.example", found) is None


def test_problems_map_to_the_egress_logs_reasons() -> None:
    assert judge_hello("allowed.example", Problem.NO_SNI) is Reason.SNI_MISSING
    assert judge_hello("allowed.example", Problem.NOT_TLS) is Reason.NOT_TLS
    assert {judge_hello("a.example", p) for p in Problem} <= set(Reason)
    assert shown_name(Hello(b"evil\0\xff\\ .example")) == "evil\\x00\\xff\\x5c\\x20.example"
    assert shown_name(Problem.NO_SNI) is None


# -- hostile bytes -------------------------------------------------------------------------------------


def _check(data: bytes) -> Hello | Problem | NeedMore:
    found = parse(data)
    assert isinstance(found, Hello | Problem | NeedMore)
    if isinstance(found, NeedMore):
        assert len(data) < found.total <= MAX_BYTES
    return found


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=4096))
def test_random_bytes_never_raise(data: bytes) -> None:
    _check(data)
    _check(b"\x16\x03\x01" + data)
    _check(HELLO[:9] + data)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(HELLO) - 1), st.integers(0, 255), st.binary(max_size=64))
def test_a_mutated_real_hello_never_raises_and_an_answer_does_not_change(
    at: int, value: int, more: bytes
) -> None:
    data = HELLO[:at] + bytes([value]) + HELLO[at + 1 :]
    found = _check(data)
    if not isinstance(found, NeedMore):  # once decided, more bytes do not change the answer
        assert parse(data + more) == found


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 300), max_size=MAX_RECORDS - 1))
def test_any_fragmentation_of_a_real_hello_gives_its_name(sizes: list[int]) -> None:
    split = records(MESSAGE, sizes)
    assert parse(split) == Hello(b"allowed.example")
    for cut in {0, 1, 5, len(split) // 2, len(split) - 1}:
        assert isinstance(_check(split[:cut]), NeedMore)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=300))
def test_any_host_name_bytes_come_back_as_sent(name: bytes) -> None:
    assert parse(records(hello_message(server_name(name)))) == Hello(name)

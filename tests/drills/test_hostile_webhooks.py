"""Drill: hostile deliveries against the real webhook endpoint, hostile bytes against the policy loader.

The endpoint runs as `baton serve` runs it (uvicorn on a loopback socket, a real Redis), with
``BATON_MAX_BODY_BYTES`` set small. Hypothesis sends it a few thousand deliveries: missing, duplicate
and garbage headers, signatures made with the wrong key, cut short, of another algorithm or for
another body, bodies up to and past the limit (with and without Content-Length), and validly signed
bodies of odd JSON (arrays, nulls, deep nesting, huge numbers, unicode, invalid UTF-8, real payloads
with fields swapped for nonsense). What must hold:

1. no answer is a 5xx (Redis is up the whole time);
2. a body that no X-Hub-Signature-256 it came with signs is answered 401 or 413 and leaves Redis
   exactly as it was; afterwards every task in Redis is a signed delivery that was answered
   ``202 queued``, and every stored body is a signed one;
3. afterwards a validly signed ``issues.labeled`` delivery still becomes a task.

The policy loader (``worker.policy.parse``, then ``org_policy`` and ``merge``) gets structured
hostile YAML and mangled bytes; it returns a policy or raises ``PolicyError`` naming file, line and
column, never anything else. (tests/worker/policy/test_policy_load_errors.py already fuzzes it with
short random text and bytes; this goes after YAML's own features and encodings.)
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import io
import json
import socket
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import example as also
from hypothesis import strategies as st
from rq.queue import Queue

from baton import queues, records
from baton import settings as baton_settings
from baton.logs import DeliveryLog
from bot.app import WEBHOOK_PATH, create_app
from bot.signature import sign
from tests.conftest import SECRET, example, labeled, serve_app
from worker.policy import DEFAULT_POLICY, PolicyError, TaskFacts, decide, explain, merge, org_policy, parse

pytestmark = [
    pytest.mark.drill,
    # A failing example's bodies are up to 96 KB: let Hypothesis print them rather than turn its
    # warning about that into an error that hides the failure.
    pytest.mark.filterwarnings("ignore:Generating overly large repr"),
]


def words(text: str) -> list[str]:
    return text.split()


def text(value: object) -> str:
    """A Redis reply as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


#: BATON_MAX_BODY_BYTES for the drill: above GitHub's largest example payload here (28 KB).
LIMIT = 32 * 1024


def also_each(cases: list[Any]) -> Any:
    """Hypothesis' ``example`` for each of ``cases``: run first, every time."""

    def apply(test: Any) -> Any:
        for case in reversed(cases):
            test = also(case)(test)
        return test

    return apply


def examples(n: int) -> settings:
    """Bounded: about 2,600 cases in all, ~30 s on this 2-core machine while it is busy."""
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- what is sent -----------------------------------------------------------------------------------------

#: Payloads the routing table acts on, as GitHub sends them (under the limit).
LABELED = labeled()
BASES: list[tuple[str, dict[str, Any]]] = [
    ("issues", LABELED),
    ("issues", example("issues", "unlabeled")),
    ("issue_comment", example("issue_comment", "created")),
    ("pull_request", example("pull_request", "opened")),
    ("check_run", example("check_run", "rerequested")),
    ("check_run", example("check_run", "requested_action")),
    ("check_suite", example("check_suite", "rerequested")),
    ("installation", example("installation", "created")),
    ("installation_repositories", example("installation_repositories", "added")),
]
BASES[2][1]["comment"]["body"] = "/baton run claude-code --offline"
#: The fields routing reads, where a swapped value could hurt.
FIELDS = [tuple(path.split(".")) for path in words("""
    action installation installation.id repository repository.id repository.full_name repository.private
    repository.default_branch sender sender.login sender.type label label.name issue issue.number
    issue.title issue.body comment comment.body comment.performed_via_github_app pull_request
    pull_request.number pull_request.head pull_request.head.sha check_run check_run.id check_run.head_sha
    check_run.pull_requests check_run.check_suite check_suite check_suite.id check_suite.head_sha
    requested_action requested_action.identifier""")]  # fmt: skip
ROUTED = ["issues", "issue_comment", "pull_request", "check_run", "check_suite", "installation",
          "installation_repositories", "ping"]  # fmt: skip
EVENTS = [*ROUTED, "push", "star", "ISSUES", "issues ", " issues", "\tissues", "is sues", ""]

_big_ints = st.sampled_from([2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 10**40])
_scalars = (
    st.none() | st.booleans() | st.integers() | _big_ints | st.floats(allow_nan=False) | st.text(max_size=30)
    | st.sampled_from(["agent:claude-code", "agent:", "agent: x", "agent:../../x", "/baton run x", "a" * 2000,
                       "\u202eagent:x", "\x00"])
)  # fmt: skip
json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=6,
)
#: Raw texts that are JSON only by some parser's lights, or not at all.
RAW_JSON = [
    b"", b" ", b"null", b"[]", b"{}", b"[{}]", b'"x"', b"1e999", b"-0", b"NaN", b"Infinity", b"9" * 400,
    b'{"action": 1e400}', b'{"a": 1} {"b": 2}', b'{"a": 1,}', b"{'a': 1}", b'{"action": "\\ud800"}',
    b'{"\\udfff": "x", "action": "labeled"}', b'{"action": "labeled\\u0000"}', b'{"action": "\xff\xfe"}',
    b"\xef\xbb\xbf{}", b"\xff\xfe{\x00}\x00", b'{"a": "\xc3"}', b'{"action":"labeled","action":"unlabeled"}',
    b"[" * 5000 + b"]" * 5000, b'{"a":' * 600 + b"1" + b"}" * 600, b"\x00" * 64,
]  # fmt: skip


@st.composite
def mutated_payloads(draw: st.DrawFn) -> tuple[str, bytes]:
    """A real payload with a few of the fields routing reads swapped for nonsense or removed."""
    event, base = draw(st.sampled_from(BASES))
    payload = json.loads(json.dumps(base))
    for path in draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=4)):
        parent: Any = payload
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue
        if draw(st.booleans()):
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = draw(json_values)
    payload["drill"] = str(draw(st.uuids()))  # mostly a new body each time (Baton stores a body once)
    body = json.dumps(payload, ensure_ascii=draw(st.booleans())).encode()
    return event, body


@st.composite
def odd_json(draw: st.DrawFn) -> bytes:
    which = draw(st.integers(0, 3))
    if which == 0:
        return draw(st.sampled_from(RAW_JSON))
    if which == 1:
        depth = draw(st.sampled_from([10, 500, 1100, 3000]))
        return b'{"action":"labeled","x":' + b"[" * depth + b"]" * depth + b"}"
    if which == 2:
        return json.dumps(draw(json_values), ensure_ascii=draw(st.booleans())).encode()
    return draw(st.binary(max_size=300))


@st.composite
def sized_bodies(draw: st.DrawFn) -> bytes:
    """A real labeled payload padded to a size around the limit."""
    size = draw(
        st.sampled_from([LIMIT - 1, LIMIT, LIMIT + 1, LIMIT + 4096, 2 * LIMIT]) | st.integers(1, 3 * LIMIT)
    )
    payload = {**LABELED, "drill": str(draw(st.uuids()))}
    head = json.dumps(payload).encode()[:-1] + b', "pad": "'
    if size < len(head) + 2:
        return head[:size]
    return head + b"p" * (size - len(head) - 2) + b'"}'


#: What the X-Hub-Signature-256 header(s) carry, for body ``b``.
SIGNATURES: dict[str, Any] = {
    "valid": lambda b: [sign(SECRET, b)],
    "missing": lambda b: [],
    "wrong-key": lambda b: [sign(b"not-the-secret", b)],
    "empty-key": lambda b: [sign(b"", b)],
    "other-body": lambda b: [sign(SECRET, b + b" ")],
    "truncated": lambda b: [sign(SECRET, b)[:-1]],
    "extended": lambda b: [sign(SECRET, b) + "0"],
    "upper-hex": lambda b: ["sha256=" + sign(SECRET, b)[7:].upper()],
    "no-prefix": lambda b: [sign(SECRET, b)[7:]],
    "sha1": lambda b: ["sha1=" + hashlib.sha1(b).hexdigest()],  # a wrong algorithm on purpose
    "sha512": lambda b: ["sha512=" + hashlib.sha512(b).hexdigest()],
    "empty": lambda b: [""],
    "prefix-only": lambda b: ["sha256="],
    "padded": lambda b: ["  " + sign(SECRET, b) + " "],  # HTTP strips the spaces: still valid
    "twice-valid-last": lambda b: ["sha256=" + "0" * 64, sign(SECRET, b)],
    "twice-valid-first": lambda b: [sign(SECRET, b), "sha256=" + "0" * 64],
    "comma-joined": lambda b: [sign(SECRET, b) + ", sha256=" + "0" * 64],
}
_header_bytes = st.binary(max_size=40).map(lambda b: bytes(c for c in b if c > 0x20 and c != 0x7F))
garbage_headers = st.sampled_from(
    [b"", b"../../etc/passwd", b"x" * 101, b"a b", b" x ", b"\xff\xfe", b"null", b"-leading-dash", b"ok_id-1"]
) | _header_bytes  # fmt: skip
UUIDS = st.uuids().map(lambda u: str(u).encode())


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[list[tuple[bytes, bytes]], bytes, bool]:
    """(headers, body, chunked): any mixture of the above."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        event, body = draw(mutated_payloads())
    elif kind == 1:
        event, body = draw(st.sampled_from(EVENTS)), draw(odd_json())
    elif kind == 2:
        event, body = "issues", draw(sized_bodies())
    else:
        event, body = draw(st.sampled_from(EVENTS)), draw(st.binary(max_size=2000))
    headers: list[tuple[bytes, bytes]] = []
    signature = draw(st.just("valid") | st.sampled_from(sorted(SIGNATURES)))
    headers += [(b"X-Hub-Signature-256", s.encode("latin-1")) for s in SIGNATURES[signature](body)]
    if draw(st.integers(0, 4)) == 0:
        headers.append((b"X-Hub-Signature-256", draw(garbage_headers)))
    events = draw(
        st.just([event.encode()])
        | st.sampled_from([[], [event.encode(), b"ping"], [b"ping", event.encode()]])
        | st.lists(garbage_headers, max_size=2)
    )
    headers += [(b"X-GitHub-Event", e) for e in events]
    ids = draw(st.lists(UUIDS, min_size=1, max_size=1) | st.lists(UUIDS | garbage_headers, max_size=2))
    headers += [(b"X-GitHub-Delivery", d) for d in ids]
    headers += [(b"Content-Type", b"application/json"), (b"User-Agent", b"GitHub-Hookshot/drill")]
    return headers, body, draw(st.booleans())


def _headers(body: bytes, event: bytes = b"issues", delivery: bytes | None = None,
             signature: bytes | None = None) -> list[tuple[bytes, bytes]]:  # fmt: skip
    delivery = delivery or str(uuid.UUID(hashlib.sha256(body).hexdigest()[:32])).encode()  # a GUID, as GitHub
    return [(b"X-GitHub-Event", event), (b"X-GitHub-Delivery", delivery),
            (b"X-Hub-Signature-256", signature or sign(SECRET, body).encode())]  # fmt: skip


_ANOTHER_ID = b"72d3162e-cc78-11e3-81ab-4c9367dc0958"  # GitHub's docs' example GUID
_STORED = json.dumps({**LABELED, "drill": "stored before the fuzz"}).encode()
_QUEUED = json.dumps({**LABELED, "drill": "explicit"}).encode()
#: One delivery per answer the endpoint can give, always sent first (Hypothesis' ``example``), so every
#: branch is reached whatever the random draws are: (headers, body, chunked).
EXPLICIT = [
    (_headers(_QUEUED), _QUEUED, False),  # queued
    (_headers(_STORED, delivery=_ANOTHER_ID), _STORED, False),  # duplicate: a stored body again
    (_headers(b'{"zen": "z"}', b"ping"), b'{"zen": "z"}', False),  # ping
    (_headers(b'{"action": "created"}', b"star"), b'{"action": "created"}', False),  # ignored
    (_headers(_QUEUED, signature=b"sha256=" + b"0" * 64), _QUEUED, False),  # invalid-signature
    (_headers(_QUEUED)[:2], _QUEUED, True),  # missing-signature
    (_headers(b"x" * (LIMIT + 1)), b"x" * (LIMIT + 1), False),  # too-large
    (_headers(b"[1, 2]"), b"[1, 2]", False),  # bad-json
    (_headers(b'{"action": "labeled", "label": {"name": "agent:x"}}'),
     b'{"action": "labeled", "label": {"name": "agent:x"}}', False),  # bad-payload
    (_headers(b"{}")[1:], b"{}", False),  # missing-event
    ([_headers(b"{}")[0], _headers(b"{}")[2]], b"{}", False),  # missing-delivery
    (_headers(b"{}", delivery=b"../../etc"), b"{}", False),  # bad-delivery-id
]  # fmt: skip


def signed(headers: list[tuple[bytes, bytes]], body: bytes) -> bool:
    """Whether any X-Hub-Signature-256 sent (as HTTP hands it over, spaces stripped) signs the body."""
    valid = sign(SECRET, body).encode()
    return any(n.lower() == b"x-hub-signature-256" and v.strip(b" \t") == valid for n, v in headers)


# -- the endpoint -----------------------------------------------------------------------------------------


def exchange(port: int, request: bytes, *, half_close: bool = False) -> bytes:
    """Send raw bytes on a fresh loopback connection, then read until the server hangs up.

    A hand-written client, because HTTP libraries refuse to send much of what this drill sends
    (spaces around header values, bytes past 0x7f, several Content-Lengths)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        with contextlib.suppress(OSError):  # the server may answer (413) and hang up mid-body
            conn.sendall(request)
            if half_close:  # the request is all there is: a body shorter than announced is cut off here
                conn.shutdown(socket.SHUT_WR)
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := conn.recv(65536):
                answer += chunk
    return answer


@dataclass(frozen=True)
class Answer:
    status: int
    json: dict[str, Any] | None  # None: not the endpoint's answer (the HTTP server's own 4xx)


def post(port: int, headers: list[tuple[bytes, bytes]], body: bytes, chunked: bool) -> Answer:
    head = b"POST " + WEBHOOK_PATH.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    head += b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    if chunked:
        framed = b"".join(
            b"%x\r\n%b\r\n" % (len(c), c) for c in (body[i : i + 4096] for i in range(0, len(body), 4096))
        )
        request = head + b"Transfer-Encoding: chunked\r\n\r\n" + framed + b"0\r\n\r\n"
    else:
        request = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
    answer = exchange(port, request)
    status_line, _, rest = answer.partition(b"\r\n")
    status = int(status_line.split(b" ", 2)[1])
    head_text, _, content = rest.partition(b"\r\n\r\n")
    is_json = b"content-type: application/json" in head_text.lower()
    return Answer(status, orjson.loads(content) if is_json else None)


@dataclass
class Live:
    url: str
    port: int
    rdb: redis.Redis
    log: io.BytesIO
    queued: set[str] = field(default_factory=set)  # task ids answered 202 queued
    signed_bodies: set[str] = field(default_factory=set)  # sha256 of every signed body sent
    outcomes: Counter[str] = field(default_factory=Counter)
    sent: int = 0  # deliveries that reached the endpoint (it logs one line each)

    def post(self, headers: list[tuple[bytes, bytes]], body: bytes, chunked: bool) -> Answer:
        r = post(self.port, headers, body, chunked)
        assert r.status < 500, (r, headers, body[:200])
        if r.json is not None:
            self.sent += 1
            self.outcomes[str(r.json.get("error") or r.json.get("status"))] += 1
        else:
            assert r.status == 400, r  # the HTTP server refused the request before the endpoint
            self.outcomes["http-400"] += 1
        return r

    def deliver(self, headers: list[tuple[bytes, bytes]], body: bytes, chunked: bool) -> None:
        """Send one delivery and check invariants 1 and 2 for it."""
        is_signed = signed(headers, body)
        before = None if is_signed else self.rdb.dbsize()
        r = self.post(headers, body, chunked)
        if not is_signed:
            assert r.json is None or r.status in (401, 413), (r, headers)
            assert self.rdb.dbsize() == before, "an unsigned delivery changed Redis"
            return
        self.signed_bodies.add(hashlib.sha256(body).hexdigest())
        if r.json is not None and r.status == 202 and r.json["status"] == "queued":
            self.queued.add(r.json["task_id"])

    def check_stored(self) -> None:
        """Invariant 2, over all of Redis: only signed, queued deliveries became tasks."""
        jobs = {
            text(j)
            for spec in queues.ALL
            for j in self.rdb.lrange(Queue.redis_queue_namespace_prefix + spec.name, 0, -1)
        }
        assert jobs == self.queued
        registry = {text(t) for t in self.rdb.zrange(records.REGISTRY_PREFIX + records.QUEUED, 0, -1)}
        assert registry == self.queued
        bodies = {text(k)[len(queues.BODY_PREFIX) :] for k in self.rdb.scan_iter(queues.BODY_PREFIX + "*")}
        assert bodies <= self.signed_bodies
        lines = [orjson.loads(line) for line in self.log.getvalue().splitlines()]
        assert len(lines) == self.sent  # one log line per delivery, each one valid JSON
        assert SECRET not in self.log.getvalue()


@pytest.fixture
def live(redis_url: str, rdb: redis.Redis) -> Iterator[Live]:
    config = baton_settings.load({"WEBHOOK_SECRET": SECRET.decode(), "BATON_MAX_BODY_BYTES": str(LIMIT)})
    assert config.max_body_bytes == LIMIT
    log = io.BytesIO()
    with serve_app(create_app(config, redis_url, DeliveryLog(log, enabled=True))) as url:
        yield Live(url, int(url.rsplit(":", 1)[1]), rdb, log)


def still_works(live: Live) -> None:
    """Invariant 3: a plain signed issues.labeled delivery becomes a task, as before the drill."""
    payload = labeled()
    payload["issue"]["body"] = f"after the drill {uuid.uuid4()}"
    body = json.dumps(payload).encode()
    delivery = str(uuid.uuid4())
    headers = [
        (b"X-GitHub-Event", b"issues"),
        (b"X-GitHub-Delivery", delivery.encode()),
        (b"X-Hub-Signature-256", sign(SECRET, body).encode()),
        (b"Content-Type", b"application/json"),
    ]
    r = live.post(headers, body, chunked=False)
    assert (r.status, r.json) == (202, {"status": "queued", "task_id": delivery, "kind": "agent_run"})
    live.queued.add(delivery)
    live.signed_bodies.add(hashlib.sha256(body).hexdigest())
    assert delivery.encode() in live.rdb.lrange(
        Queue.redis_queue_namespace_prefix + queues.CONTROL.name, 0, -1
    )
    live.check_stored()


def test_hostile_deliveries_never_5xx_and_never_store_an_unsigned_body(live: Live) -> None:
    @examples(1000)
    @given(deliveries())
    @also_each(EXPLICIT)
    def hostile(delivery: tuple[list[tuple[bytes, bytes]], bytes, bool]) -> None:
        live.deliver(*delivery)

    live.deliver(_headers(_STORED), _STORED, chunked=False)
    hostile()
    # Every branch of the endpoint was reached, or the drill proves less than it says.
    seen = set(live.outcomes)
    for outcome in (
        "queued",
        "duplicate",
        "ignored",
        "invalid-signature",
        "missing-signature",
        "too-large",
        "bad-json",
        "bad-payload",
        "missing-event",
        "missing-delivery",
        "bad-delivery-id",
    ):
        assert outcome in seen, (outcome, live.outcomes)
    still_works(live)


def test_validly_signed_odd_json_is_a_4xx_or_a_task_never_a_5xx(live: Live) -> None:
    """Every body here is signed: what reaches the parser and the routing table is the test."""

    @examples(600)
    @given(st.sampled_from(EVENTS[:9]), odd_json() | mutated_payloads().map(lambda p: p[1]), UUIDS)
    def odd(event: str, body: bytes, delivery: bytes) -> None:
        headers = [
            (b"X-GitHub-Event", event.encode()),
            (b"X-GitHub-Delivery", delivery),
            (b"X-Hub-Signature-256", sign(SECRET, body).encode()),
        ]
        live.deliver(headers, body, chunked=False)

    odd()
    still_works(live)


def test_bodies_around_the_limit_are_413_past_it_with_or_without_content_length(live: Live) -> None:
    @examples(150)
    @given(sized_bodies(), st.booleans(), st.booleans(), UUIDS)
    def sized(body: bytes, chunked: bool, sign_it: bool, delivery: bytes) -> None:
        headers = [(b"X-GitHub-Event", b"issues"), (b"X-GitHub-Delivery", delivery)]
        if sign_it:
            headers.append((b"X-Hub-Signature-256", sign(SECRET, body).encode()))
        r = live.post(headers, body, chunked)
        assert r.json is not None
        if not sign_it:  # refused unread: by its Content-Length if too large, else for the signature
            assert r.status == (413 if len(body) > LIMIT and not chunked else 401), r
        elif len(body) > LIMIT:
            assert (r.status, r.json["error"]) == (413, "too-large")
        else:
            # A cut-off payload is bad-json; a body or id drawn twice is a duplicate.
            assert (r.status, r.json.get("status")) in ((202, "queued"), (400, None), (200, "duplicate")), r
        if r.status == 202:
            live.queued.add(r.json["task_id"])
            live.signed_bodies.add(hashlib.sha256(body).hexdigest())

    sized()
    still_works(live)


#: Requests no HTTP client library would send: the server must answer 4xx or hang up, never 5xx.
_POST = b"POST /api/github/webhooks HTTP/1.1\r\nHost: x\r\n"
MALFORMED = [
    _POST + b"Content-Length: -1\r\n\r\n",
    _POST + b"Content-Length: abc\r\n\r\n",
    _POST + b"Content-Length: 99999999999999999999999\r\n\r\n",
    _POST + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    _POST + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    _POST + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    _POST + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    _POST + b"X-Hub-Signature-256: sha256=\x00\x01\r\nContent-Length: 2\r\n\r\n{}",
    _POST + b"X-GitHub-Event: iss\xffues\r\nX-GitHub-Delivery: \xfe\r\nX-Hub-Signature-256: "
    + sign(SECRET, b"{}").encode() + b"\r\nContent-Length: 2\r\n\r\n{}",
    _POST + b"X-Hub-Signature-256 : sha256=00\r\nContent-Length: 2\r\n\r\n{}",
    _POST + b"X-Hub-Signature-256:\r\n sha256=00\r\nContent-Length: 2\r\n\r\n{}",  # obsolete line folding
    _POST + b"X-Pad: " + b"a" * 70000 + b"\r\n\r\n",
    _POST + b"Content-Length: 100\r\n\r\n{}",  # and then the client hangs up: a body cut off
    b"POST /api/github/webhooks HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}",
    b"POST /api/github/webhooks?x=1#frag HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
    b"POST //api/github/webhooks HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
    b"POST /api/github/webhooks HTTP/9.9\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
    b"GARBAGE\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello's first bytes
]  # fmt: skip


@pytest.mark.parametrize("raw", MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_http_is_never_a_5xx_and_stores_nothing(live: Live, raw: bytes) -> None:
    answer = exchange(live.port, raw, half_close=True)
    if answer:  # hanging up without an answer is fine; a 5xx is not
        status = int(answer.split(b" ", 2)[1])
        assert 400 <= status < 500, answer[:300]
    assert live.rdb.dbsize() == 0
    # The endpoint may or may not have seen it (and then logged it) before the HTTP parser gave up.
    live.sent = len(live.log.getvalue().splitlines())
    still_works(live)


# -- the policy loader ---------------------------------------------------------------------------------------

VALID_ORG = """\
version: 1
trigger:
  min_permission: write
  allow_bots: ["dependabot[bot]"]
agents:
  claude-code:
    adapter: claude-code
    tools: [read_repo, edit_files, web_fetch]
    model_endpoints: [api.anthropic.com]
    egress: [pypi.org]
    env: [ANTHROPIC_API_KEY]
    timeout: 30m
  runner:
    adapter: command
    command: ["./run", "{prompt_file}"]
    tools: [read_repo]
tools:
  my-search: [untrusted_input, external_comm]
paths:
  protected: ["src/**"]
gates:
  - name: tests
    run: make test
    timeout: 10m
limits:
  max_concurrent_runs: 2
  max_diff_lines: 2000
  installation: {max_runs_per_day: 100}
"""
KEYS = words("""version trigger min_permission allow_bots agents adapter tools command model_endpoints
    egress env timeout paths protected gates name run limits max_concurrent_runs max_diff_lines
    max_runs_per_day
    max_agent_minutes_per_day installation claude-code codex script read_repo web_fetch << - ?""")
#: Scalars as YAML spells them: each of these means something odd to a YAML 1.1 reader.
HOSTILE_SCALARS = [
    "1", "1.0", "20.0", ".inf", "-.inf", ".nan", "1e400", "0x1F", "0o17", "017", "1_000", "1:30:00",
    "2001-12-14", "2001-13-45", "2001-12-14t21:59:43.10-05:00", "~", "null", "yes", "no", "on", "off", "y",
    "n", "=", "<<",
    "9" * 5000, "-" + "9" * 400, '""', "''", '"\\x00"', '"\\u202e"', '"\\U000E0041"', '"\\uFEFF"', '"\\0"',
    '"\\e\\a"', "|\n  x\n", ">-\n  x\n", "!!binary aGVsbG8=", "!!python/object/apply:os.system [echo]",
    "!!set {a}", "!!omap [a: 1]", "!custom x", "&a 1", "*a", "[]", "{}", "[a, [b, [c]]]", "{a: {b: {c: d}}}",
    "30m", "30s", "2h", "0s", "999999999h", "write", "admin", "read", "untrusted_input", "dependabot[bot]",
    "api.anthropic.com", "127.0.0.1", "https://x.io/", "A_B", "MY-KEY", "src/**", "../../etc", "\t",
    "a\u0085b", "#", "%", "@", "`",
]  # fmt: skip
#: Whole-document oddities: directives, several documents, comments, flow and block mixed.
HOSTILE_DOCS = [
    "%YAML 1.1\n---\nversion: 1\n", "%TAG ! tag:evil.com,2000:\n---\nversion: !x 1\n",
    "%YAML 9.9\n---\nversion: 1\n", "---\nversion: 1\n...\n---\nversion: 1\n", "...\n", "version: 1\n---\n",
    "? version\n: 1\n", "? [a, b]\n: 1\n", "{version: 1, version: 1}\n", "version: 1\n\tagents: {}\n",
    "version:\t1\n", "version: 1 # c\n#\n", "[version, 1]\n",
    "version: 1\nagents: {a: &x {adapter: codex, tools: []}, b: *x}\n",
    "version: 1\n<<: {limits: {max_diff_lines: 1}}\n", "version: 1\nlimits: {<<: {a: 1}}\n",
    "version: 1\r\nlimits: {}\r\n", "version: 1\rlimits: {}\r", "version: 1\x85limits: {}\n",
    "version: 1\u2028limits: {}\n", "\ufeffversion: 1\n", "version: 1\n" + "#" * 70000,
]  # fmt: skip
#: How a file's text may reach the loader as bytes.
ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-32", "latin-1", "cp1252", "shift_jis"]


@st.composite
def yaml_trees(draw: st.DrawFn, depth: int = 0) -> str:
    """A random YAML document (as text) built from policy keys and hostile scalars, in any style."""
    if depth >= 2 or draw(st.integers(0, 2)) == 0:
        return draw(st.sampled_from(HOSTILE_SCALARS) | st.text(max_size=12).map(json.dumps))
    indent = "  " * (depth + 1)
    children = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3))
    values = [draw(yaml_trees(depth + 1)) for _ in children]
    style = draw(st.sampled_from(["block-map", "flow-map", "block-seq", "flow-seq"]))
    if style == "flow-map":
        return "{" + ", ".join(f"{k}: {v.strip()}" for k, v in zip(children, values, strict=True)) + "}"
    if style == "flow-seq":
        return "[" + ", ".join(v.strip() for v in values) + "]"
    if style == "block-seq":
        return "\n" + "".join(f"{indent}- {v.strip()}\n" for v in values)
    return "\n" + "".join(f"{indent}{k}: {v.strip()}\n" for k, v in zip(children, values, strict=True))


@st.composite
def hostile_policy_files(draw: st.DrawFn) -> str | bytes:
    which = draw(st.integers(0, 5))
    if which == 0:  # a random document under a valid header
        keys = draw(st.lists(st.sampled_from(KEYS[:20]), min_size=1, max_size=5, unique=True))
        text = "version: 1\n" + "".join(f"{k}: {draw(yaml_trees(1)).strip()}\n" for k in keys)
    elif which == 1:  # one line of the valid file swapped for hostile YAML
        lines = VALID_ORG.splitlines(keepends=True)
        at = draw(st.integers(0, len(lines) - 1))
        key, _, _ = lines[at].partition(":")
        lines[at] = f"{key}: {draw(st.sampled_from(HOSTILE_SCALARS))}\n"
        text = "".join(lines)
    elif which == 2:
        text = draw(st.sampled_from(HOSTILE_DOCS))
    elif which == 3:  # nesting just under, at and over the loader's depth limit
        n = draw(st.sampled_from([30, 31, 32, 33, 200]))
        text = "version: 1\nx: " + draw(st.sampled_from(["[" * n + "]" * n, "{a: " * n + "1" + "}" * n]))
    else:
        text = VALID_ORG
    if which == 4:  # text the loader gets as str; lone surrogates are a known gap, see below
        return text
    data = text.encode(draw(st.sampled_from(ENCODINGS)), errors="replace")
    if draw(st.booleans()):  # then mangle the bytes: cut, splice, flip
        at = draw(st.integers(0, len(data)))
        data = draw(
            st.sampled_from(
                [
                    data[:at],
                    data[:at] + draw(st.binary(max_size=16)) + data[at:],
                    data[:at] + data[at:][::-1],
                    data[:at] + b"\x00" + data[at + 1 :],
                ]
            )
        )
    return data


def _load_everything(data: str | bytes) -> None:
    """The loader's whole path as a worker takes it: file to ceiling, and file as a repo's narrowing;
    then the gate on every agent that came out."""
    doc = parse(data, "fuzz.yml")
    ceiling = org_policy(doc)
    merged = merge(DEFAULT_POLICY, doc)
    for policy in (ceiling, merged.policy):
        for name in policy.agents:
            explain(decide(policy, TaskFacts(agent=name, repo_private=True)))


@examples(800)
@given(hostile_policy_files())
def test_hostile_policy_bytes_give_a_policy_or_a_located_policy_error(data: str | bytes) -> None:
    try:
        _load_everything(data)
    except PolicyError as exc:
        error = exc
    else:
        return
    assert error.problems
    assert error.message
    for problem in error.problems:
        assert problem.file == "fuzz.yml"
        assert problem.line >= 1
        assert problem.col >= 1
        assert problem.message.strip()


def test_the_loader_fuzz_reaches_both_outcomes() -> None:
    """The strategies above are not all refusals: the valid file, and its encodings, load."""
    for encoding in ("utf-8", "utf-8-sig"):
        _load_everything(codecs.encode(VALID_ORG, encoding))
    with pytest.raises(PolicyError):
        _load_everything(VALID_ORG.encode("utf-16"))


# Found by this drill (2026-11-30), fixed in worker/policy/_yaml.py: text no UTF-8 can hold is a
# located PolicyError, and no problem message ever quotes it.


def test_text_with_a_lone_surrogate_is_a_policy_error() -> None:
    """A str that is not valid Unicode (e.g. read with errors='surrogateescape')."""
    with pytest.raises(PolicyError) as caught:
        parse("version: 1\n# \udcff\n", "fuzz.yml")
    assert str(caught.value).startswith("fuzz.yml:2:3: not valid Unicode text (a lone surrogate)")


SURROGATE_KEY = b'version: 1\nagents: {"\\ud800": {adapter: codex, tools: []}}\n'
SURROGATE_VALUE = b'version: 1\nagents: {a: {adapter: codex, tools: ["\\udc00"]}}\n'


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (SURROGATE_KEY, "fuzz.yml:2:10: agents: a key holds"),
        (SURROGATE_VALUE, "fuzz.yml:2:38: agents.a.tools[0]:"),
    ],
)
def test_a_policy_error_is_always_valid_utf8_text(data: bytes, where: str) -> None:
    """A double-quoted YAML escape ``"\\ud800"`` decodes to a lone surrogate: refused where it stands, and the
    message (a status comment, a log line, a Redis write) never quotes it."""
    with pytest.raises(PolicyError) as caught:
        parse(data, "fuzz.yml")
    message = str(caught.value)
    assert message.startswith(where), message
    message.encode("utf-8")

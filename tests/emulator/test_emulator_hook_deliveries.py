"""GitHub's App webhook-deliveries API on the emulator: list, show, redeliver (App JWT only)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from emulator_world import World, keypair
from webhook_receiver import Receiver, assert_signed

from emulator.admin.client import AdminClient

DELIVERIES = "/app/hook/deliveries"
NOT_A_JWT = "A JSON web token could not be decoded"
# The ``required`` lists of the schemas ``hook-delivery-item`` and ``hook-delivery`` in the
# OpenAPI description of api.github.com, npm ``@octokit/openapi`` 23.0.2,
# ``generated/api.github.com.json`` (not fetched here: the suite runs offline).
ITEM_REQUIRED = {
    "id", "guid", "delivered_at", "redelivery", "duration", "status", "status_code", "event", "action",
    "installation_id", "repository_id",
}  # fmt: skip
DETAIL_REQUIRED = ITEM_REQUIRED | {"request", "response"}
# Optional in those schemas, always present in GitHub's answers (its examples have them).
ITEM_OPTIONAL = {"throttled_at"}
DETAIL_OPTIONAL = ITEM_OPTIONAL | {"url"}


@pytest.fixture
def app_api(hooked: World) -> Iterator[httpx.Client]:
    """The API as the App itself (a fresh JWT; tests here are far shorter than its ten minutes)."""
    with httpx.Client(
        base_url=hooked.url, headers={"Authorization": f"Bearer {hooked.jwt()}"}, timeout=10
    ) as client:
        yield client


def _send(world: World, action: str, **extra: Any) -> dict[str, Any]:
    """One delivery to the App, sent before this returns; answers the admin record (``id``, ``guid``)."""
    payload = {
        "action": action,
        "installation": {"id": world.installation_id},
        "repository": {"id": 4242},
        **extra,
    }
    return world.post("/webhooks", {"event": "issues", "payload": payload})


def _closed_port() -> int:
    """A loopback port nothing listens on: connecting to it is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _next(response: httpx.Response) -> str | None:
    """The ``rel="next"`` URL of GitHub's ``Link`` header, if any."""
    for part in response.headers.get("link", "").split(","):
        url, _, rel = part.partition(";")
        if rel.strip() == 'rel="next"':
            return url.strip().strip("<>")
    return None


def _wait_for(predicate: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError("timed out waiting")


# -- auth ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", DELIVERIES), ("GET", DELIVERIES + "/{id}"), ("POST", DELIVERIES + "/{id}/attempts")],
)
def test_only_an_app_jwt_may_call(hooked: World, method: str, path: str) -> None:
    sent = _send(hooked, "opened")
    path = path.format(id=sent["id"])
    as_app = httpx.request(method, f"{hooked.url}{path}", headers={"Authorization": f"Bearer {hooked.jwt()}"})
    assert as_app.status_code in {200, 202}, as_app.text
    as_installation = httpx.request(
        method, f"{hooked.url}{path}", headers={"Authorization": f"token {hooked.token()}"}
    )
    anonymous = httpx.request(method, f"{hooked.url}{path}")
    for refused in (as_installation, anonymous):
        assert refused.status_code == 401
        assert refused.json()["message"] == NOT_A_JWT


# -- the list ------------------------------------------------------------------------------------------


def test_items_are_newest_first_in_githubs_shape(hooked: World, app_api: httpx.Client) -> None:
    sent = [_send(hooked, action) for action in ("opened", "labeled", "closed")]
    listed = app_api.get(DELIVERIES)
    assert listed.status_code == 200
    assert "link" not in listed.headers  # one page
    items = listed.json()
    assert [i["id"] for i in items] == [s["id"] for s in reversed(sent)]
    for entry, record in zip(items, reversed(sent), strict=True):
        assert set(entry) == ITEM_REQUIRED | ITEM_OPTIONAL
        assert entry["guid"] == record["guid"]
        assert (entry["status"], entry["status_code"]) == ("OK", 202)
        assert (entry["event"], entry["redelivery"], entry["throttled_at"]) == ("issues", False, None)
        assert (entry["installation_id"], entry["repository_id"]) == (hooked.installation_id, 4242)
        assert isinstance(entry["duration"], float)
        assert entry["duration"] >= 0
        assert (
            abs(
                datetime.fromisoformat(entry["delivered_at"].replace("Z", "+00:00")).timestamp() - time.time()
            )
            < 60
        )
    assert [i["action"] for i in items] == ["closed", "labeled", "opened"]


def test_status_filter_splits_by_status_code(
    hooked: World, receiver: Receiver, admin: AdminClient, app_api: httpx.Client
) -> None:
    ok = _send(hooked, "opened")
    receiver.status = 503
    refused_by_app = _send(hooked, "labeled")
    admin.update_app(hooked.app_id, webhook_url=f"http://127.0.0.1:{_closed_port()}/hook")
    unreachable = _send(hooked, "closed")

    everything = app_api.get(DELIVERIES).json()
    success = app_api.get(DELIVERIES, params={"status": "success"}).json()
    failure = app_api.get(DELIVERIES, params={"status": "failure"}).json()

    assert [i["id"] for i in everything] == [unreachable["id"], refused_by_app["id"], ok["id"]]
    assert [(i["id"], i["status"], i["status_code"]) for i in success] == [(ok["id"], "OK", 202)]
    assert [(i["id"], i["status"], i["status_code"]) for i in failure] == [
        (unreachable["id"], "failed to connect to network", 502),  # refused: GitHub's words, its 502
        (refused_by_app["id"], "Invalid HTTP Response: 503", 503),
    ]
    bad = app_api.get(DELIVERIES, params={"status": "failed"})
    assert bad.status_code == 422


def test_cursor_pages_through_everything_once(
    hooked: World, receiver: Receiver, app_api: httpx.Client
) -> None:
    sent = [_send(hooked, f"a{n}") for n in range(5)]
    receiver.status = 500
    failed = [_send(hooked, f"f{n}") for n in range(3)]

    seen: list[int] = []
    url: str | None = f"{DELIVERIES}?per_page=2"
    pages = 0
    while url is not None:
        page = app_api.get(url)
        assert page.status_code == 200
        assert 1 <= len(page.json()) <= 2
        seen += [i["id"] for i in page.json()]
        url = _next(page)
        pages += 1
        if pages == 1:
            late = _send(hooked, "late")  # newer than the cursor: not on the pages that follow
        if url is not None:
            query = parse_qs(urlsplit(url).query)
            assert query["per_page"] == ["2"]
            assert len(query["cursor"]) == 1
    assert pages == 4  # 8 deliveries, 2 a page
    assert "link" not in page.headers  # the last page has no next
    assert seen == sorted((d["id"] for d in sent + failed), reverse=True)  # no gaps, no repeats
    assert late["id"] not in seen

    only_failed: list[int] = []
    url = f"{DELIVERIES}?status=failure&per_page=2"
    while url is not None:
        page = app_api.get(url)
        only_failed += [i["id"] for i in page.json()]
        url = _next(page)
        assert url is None or parse_qs(urlsplit(url).query)["status"] == ["failure"]  # the filter is kept
    assert only_failed == [late["id"]] + [d["id"] for d in reversed(failed)]  # "late" got a 500 too


def test_bad_query_values(hooked: World, app_api: httpx.Client) -> None:
    for n in range(3):
        _send(hooked, f"a{n}")
    assert len(app_api.get(DELIVERIES, params={"per_page": "abc"}).json()) == 3  # the default, 30
    assert len(app_api.get(DELIVERIES, params={"per_page": "0"}).json()) == 1
    assert len(app_api.get(DELIVERIES, params={"per_page": "1000"}).json()) == 3  # at most 100
    assert app_api.get(DELIVERIES, params={"cursor": "not-one-of-ours"}).status_code == 400


def test_only_this_apps_deliveries(
    hooked: World, receiver: Receiver, admin: AdminClient, app_api: httpx.Client
) -> None:
    mine = _send(hooked, "opened")
    other = admin.create_app(
        name="Other", slug="other", public_key_pem=keypair("other")[1], webhook_url=receiver.url
    )
    theirs = admin.send_event("ping", {"zen": "Design for failure."}, app_id=other["id"])
    assert [i["id"] for i in app_api.get(DELIVERIES).json()] == [mine["id"]]
    assert app_api.get(f"{DELIVERIES}/{theirs['id']}").status_code == 404
    assert app_api.post(f"{DELIVERIES}/{theirs['id']}/attempts").status_code == 404


# -- one delivery --------------------------------------------------------------------------------------


def test_one_delivery_in_full(hooked: World, receiver: Receiver, app_api: httpx.Client) -> None:
    sent = _send(hooked, "opened")
    (received,) = receiver.wait_for(1)
    found = app_api.get(f"{DELIVERIES}/{sent['id']}")
    assert found.status_code == 200
    body = found.json()
    assert set(body) == DETAIL_REQUIRED | DETAIL_OPTIONAL
    assert body["url"] == receiver.url
    assert body["request"]["payload"] == received.body
    headers = body["request"]["headers"]
    assert headers["X-GitHub-Delivery"] == sent["guid"] == received.headers["x-github-delivery"]
    assert headers["X-GitHub-Event"] == "issues"
    assert headers["X-Hub-Signature-256"] == received.headers["x-hub-signature-256"]
    assert isinstance(body["response"]["headers"], dict)
    assert body["response"]["headers"]
    assert body["response"]["payload"] == ""  # the receiver answers with no body
    listed = app_api.get(DELIVERIES).json()[0]
    assert {k: body[k] for k in listed} == listed


def test_unanswered_delivery_has_no_response(
    hooked: World, admin: AdminClient, app_api: httpx.Client
) -> None:
    admin.update_app(hooked.app_id, webhook_url=f"http://127.0.0.1:{_closed_port()}/hook")
    sent = _send(hooked, "opened")
    body = app_api.get(f"{DELIVERIES}/{sent['id']}").json()
    assert (body["status"], body["status_code"]) == ("failed to connect to network", 502)
    assert body["response"] == {"headers": None, "payload": None}
    assert body["request"]["headers"]["X-GitHub-Delivery"] == sent["guid"]


@pytest.mark.parametrize("path", ["123456789", "abc"])
def test_unknown_delivery_is_404(hooked: World, app_api: httpx.Client, path: str) -> None:
    assert app_api.get(f"{DELIVERIES}/{path}").status_code == 404
    assert app_api.post(f"{DELIVERIES}/{path}/attempts").status_code == 404


# -- redelivery ----------------------------------------------------------------------------------------


def test_redelivery_sends_the_same_event_again(
    hooked: World, receiver: Receiver, app_api: httpx.Client
) -> None:
    receiver.status = 503
    failed = _send(hooked, "labeled")
    (first,) = receiver.wait_for(1)
    receiver.status = 202

    answer = app_api.post(f"{DELIVERIES}/{failed['id']}/attempts")
    assert (answer.status_code, answer.json()) == (202, {})

    again = receiver.wait_for(2)[1]
    assert_signed(again, hooked.webhook_secret)
    assert again.headers["x-github-delivery"] == failed["guid"]
    assert again.raw == first.raw
    newest = _wait_for(lambda: [i for i in app_api.get(DELIVERIES).json() if i["redelivery"]])
    (redelivered,) = newest
    assert redelivered["id"] != failed["id"]
    assert redelivered["guid"] == failed["guid"]
    assert (redelivered["status"], redelivered["status_code"]) == ("OK", 202)
    assert app_api.get(DELIVERIES).json()[0]["id"] == redelivered["id"]  # newest first
    failures = app_api.get(DELIVERIES, params={"status": "failure"}).json()
    assert [i["id"] for i in failures] == [failed["id"]]  # the first attempt stays failed


def test_deliveries_older_than_three_days_are_gone(
    hooked: World, receiver: Receiver, admin: AdminClient, app_api: httpx.Client
) -> None:
    old, recent = _send(hooked, "opened"), _send(hooked, "closed")
    admin.set_delivered_at(old["id"], time.time() - 3 * 86400 - 60)
    admin.set_delivered_at(recent["id"], time.time() - 3 * 86400 + 600)
    assert [i["id"] for i in app_api.get(DELIVERIES).json()] == [recent["id"]]
    assert app_api.get(f"{DELIVERIES}/{old['id']}").status_code == 404
    refused = app_api.post(f"{DELIVERIES}/{old['id']}/attempts")
    assert refused.status_code == 422
    assert refused.json()["message"] == "Validation Failed"
    assert app_api.post(f"{DELIVERIES}/{recent['id']}/attempts").status_code == 202
    receiver.wait_for(3)
    assert len(receiver.items) == 3  # the refused one was not sent


def test_admin_redelivery_shares_the_api_rules(hooked: World, receiver: Receiver, admin: AdminClient) -> None:
    sent = _send(hooked, "opened")
    again = admin.redeliver(sent["id"])
    assert (again["guid"], again["redelivery"]) == (sent["guid"], True)
    assert [i.headers["x-github-delivery"] for i in receiver.wait_for(2)] == [sent["guid"]] * 2


# -- log and rate limit --------------------------------------------------------------------------------


def test_calls_are_logged_and_count_against_the_apps_rate_limit(
    hooked: World, admin: AdminClient, app_api: httpx.Client
) -> None:
    sent = _send(hooked, "opened")
    first = app_api.get(DELIVERIES, params={"status": "success"})
    second = app_api.get(f"{DELIVERIES}/{sent['id']}")
    third = app_api.post(f"{DELIVERIES}/{sent['id']}/attempts")
    used = [int(r.headers["x-ratelimit-used"]) for r in (first, second, third)]
    assert used == [used[0], used[0] + 1, used[0] + 2]
    assert first.headers["x-ratelimit-resource"] == "core"
    logged = [(r["method"], r["path"], r["query"], r["status"]) for r in admin.requests()]
    assert ("GET", DELIVERIES, {"status": "success"}, 200) in logged
    assert ("GET", f"{DELIVERIES}/{sent['id']}", {}, 200) in logged
    assert ("POST", f"{DELIVERIES}/{sent['id']}/attempts", {}, 202) in logged

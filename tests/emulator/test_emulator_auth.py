"""GitHub's authentication rules: App JWTs, installation tokens, their expiry and scope."""

from __future__ import annotations

import time

import httpx
import jwt
import pytest
from emulator_world import OWNER, REPO, World, app_jwt, keypair


def _get_app(world: World, token: str) -> httpx.Response:
    return httpx.get(f"{world.url}/app", headers={"Authorization": f"Bearer {token}"}, timeout=10)


def test_valid_jwt_accepted_with_string_or_integer_iss(world: World) -> None:
    assert _get_app(world, world.jwt()).status_code == 200
    now = int(time.time())
    # PyJWT >= 2.11 refuses an int iss, but GitHub accepts one: build the token by hand.
    int_iss = jwt.api_jws.encode(
        jwt.utils.force_bytes(f'{{"iss":{world.app_id},"iat":{now - 60},"exp":{now + 500}}}'),
        world.private_key,
        algorithm="RS256",
    )
    assert _get_app(world, int_iss).status_code == 200


@pytest.mark.parametrize(
    ("token_kwargs", "message"),
    [
        ({"iat_offset": -700, "lifetime": 600}, "'Expiration time' claim ('exp') must be a numeric value"),
        ({"iat_offset": 120, "lifetime": 300}, "'Issued at' claim ('iat') must be an Integer"),
        ({"iat_offset": -30, "lifetime": 660}, "'Expiration time' claim ('exp') is too far in the future"),
    ],
    ids=["expired", "iat-in-future", "exp-too-far"],
)
def test_jwt_time_rules(world: World, token_kwargs: dict[str, int], message: str) -> None:
    response = _get_app(world, world.jwt(**token_kwargs))
    assert response.status_code == 401
    assert response.json()["message"].startswith(message)
    assert response.json()["documentation_url"].startswith("https://docs.github.com/")


def test_client_id_is_accepted_as_iss(world: World) -> None:
    client_id = httpx.get(f"{world.url}/app", headers={"Authorization": f"Bearer {world.jwt()}"}).json()[
        "client_id"
    ]
    now = int(time.time())
    token = jwt.encode(
        {"iss": client_id, "iat": now - 60, "exp": now + 500}, world.private_key, algorithm="RS256"
    )
    assert _get_app(world, token).status_code == 200


def test_iat_within_clock_skew_is_accepted(world: World) -> None:
    assert _get_app(world, world.jwt(iat_offset=30, lifetime=500)).status_code == 200


def test_jwt_from_wrong_key_or_app_is_rejected(world: World) -> None:
    other_private, _ = keypair("intruder")
    wrong_key = app_jwt(world.app_id, other_private)
    response = _get_app(world, wrong_key)
    assert response.status_code == 401
    assert response.json()["message"] == "A JSON web token could not be decoded"
    unknown_app = _get_app(world, app_jwt(999_999, world.private_key))
    assert unknown_app.status_code == 401
    assert unknown_app.json()["message"] == "Integration not found"
    hs256 = jwt.encode(
        {"iss": str(world.app_id), "iat": int(time.time()) - 60, "exp": int(time.time()) + 300},
        "x" * 32,
        algorithm="HS256",
    )
    assert _get_app(world, hs256).status_code == 401


def test_app_endpoints_need_a_jwt(world: World) -> None:
    token = world.token()
    assert httpx.get(f"{world.url}/app", headers={"Authorization": f"token {token}"}).status_code == 401
    assert httpx.get(f"{world.url}/app").status_code == 401


def test_token_expires_then_bad_credentials(world: World) -> None:
    world.admin.patch("/_emulator/settings", json={"token_ttl_seconds": 1})
    response = httpx.post(
        f"{world.url}/app/installations/{world.installation_id}/access_tokens",
        headers={"Authorization": f"Bearer {world.jwt()}"},
    )
    assert response.status_code == 201
    body = response.json()
    assert body["token"].startswith("ghs_")
    assert body["expires_at"].endswith("Z")
    with world.api(body["token"]) as api:
        assert api.get(f"/repos/{OWNER}/{REPO}").status_code == 200
        time.sleep(1.2)
        expired = api.get(f"/repos/{OWNER}/{REPO}")
    assert expired.status_code == 401
    assert expired.json()["message"] == "Bad credentials"


def test_unknown_token_is_bad_credentials(world: World) -> None:
    with world.api("ghs_" + "a" * 36) as api:
        response = api.get(f"/repos/{OWNER}/{REPO}")
    assert response.status_code == 401
    assert response.json()["message"] == "Bad credentials"


def test_token_narrowed_to_one_repository(world: World) -> None:
    token = world.token(repositories=[REPO])
    with world.api(token) as api:
        assert api.get(f"/repos/{OWNER}/{REPO}").status_code == 200
        # A private repository outside the token is invisible (404), as on GitHub.
        assert api.get(f"/repos/{OWNER}/secret-sauce").status_code == 404
    full = world.token()
    with world.api(full) as api:
        assert api.get(f"/repos/{OWNER}/secret-sauce").status_code == 200
        assert api.get("/repos/other-org/elsewhere").status_code == 404


def test_token_narrowed_permissions_refuse_writes(world: World) -> None:
    world.post(f"/repos/{OWNER}/{REPO}/issues", {"title": "t", "user": "maria"})
    token = world.token(permissions={"issues": "read"})
    with world.api(token) as api:
        assert api.get(f"/repos/{OWNER}/{REPO}/issues/1").status_code == 200
        response = api.post(f"/repos/{OWNER}/{REPO}/issues/1/comments", json={"body": "hi"})
        assert response.status_code == 403
        assert response.json()["message"] == "Resource not accessible by integration"
        checks = api.post(f"/repos/{OWNER}/{REPO}/check-runs", json={"name": "x", "head_sha": world.head_sha})
        assert checks.status_code == 403


def test_token_request_beyond_installation_is_422(world: World) -> None:
    url = f"{world.url}/app/installations/{world.installation_id}/access_tokens"
    headers = {"Authorization": f"Bearer {world.jwt()}"}
    too_much = httpx.post(url, headers=headers, json={"permissions": {"administration": "write"}})
    assert too_much.status_code == 422
    assert too_much.json()["message"] == "The permissions requested are not granted to this installation."
    foreign = httpx.post(url, headers=headers, json={"repositories": ["elsewhere"]})
    assert foreign.status_code == 422
    assert "not accessible to the parent installation" in foreign.json()["message"]
    narrowed = httpx.post(
        url, headers=headers, json={"repositories": [REPO], "permissions": {"checks": "write"}}
    )
    assert narrowed.status_code == 201
    body = narrowed.json()
    assert body["repository_selection"] == "selected"
    assert [r["full_name"] for r in body["repositories"]] == [f"{OWNER}/{REPO}"]
    assert body["permissions"] == {"checks": "write", "metadata": "read"}
    other_inst = httpx.post(f"{world.url}/app/installations/424242/access_tokens", headers=headers)
    assert other_inst.status_code == 404


def test_anonymous_reads_public_only(world: World) -> None:
    assert httpx.get(f"{world.url}/repos/{OWNER}/{REPO}").status_code == 200
    assert httpx.get(f"{world.url}/repos/{OWNER}/secret-sauce").status_code == 404
    world.post(f"/repos/{OWNER}/{REPO}/issues", {"title": "t", "user": "maria"})
    assert httpx.get(f"{world.url}/repos/{OWNER}/{REPO}/issues/1").status_code == 200
    write = httpx.post(f"{world.url}/repos/{OWNER}/{REPO}/issues/1/comments", json={"body": "x"})
    assert write.status_code == 401
    assert write.json()["message"] == "Requires authentication"

"""githubkit's response models parse every answer Baton relies on (the shape contract)."""

from __future__ import annotations

import httpx
import pytest
from emulator_world import OWNER, REPO, World
from githubkit import AppAuthStrategy, GitHub, TokenAuthStrategy
from githubkit.exception import RequestFailed


def _app(world: World) -> GitHub[AppAuthStrategy]:
    return GitHub(AppAuthStrategy(str(world.app_id), world.private_key), base_url=world.url)


def test_app_and_installation_lookups_parse(world: World) -> None:
    gh = _app(world)
    app = gh.rest.apps.get_authenticated().parsed_data
    assert app is not None
    assert app.id == world.app_id
    assert app.slug == "baton-test"
    installations = gh.rest.apps.list_installations().parsed_data
    assert [i.id for i in installations] == [world.installation_id]
    inst = gh.rest.apps.get_installation(world.installation_id).parsed_data
    assert inst.permissions.checks == "write"
    assert gh.rest.apps.get_repo_installation(OWNER, REPO).parsed_data.id == world.installation_id
    with pytest.raises(RequestFailed) as exc:
        gh.rest.apps.get_repo_installation("other-org", "elsewhere")
    assert exc.value.response.status_code == 404


def test_installation_client_reads_repo_contents_and_permissions(world: World) -> None:
    gh = _app(world).with_auth(_app(world).auth.as_installation(world.installation_id))
    repo = gh.rest.repos.get(OWNER, REPO).parsed_data
    assert repo.default_branch == "main"
    assert repo.private is False
    assert repo.full_name == f"{OWNER}/{REPO}"
    content = gh.rest.repos.get_content(OWNER, REPO, ".github/baton.yml").parsed_data
    assert content.type == "file"  # type: ignore[union-attr]
    import base64

    assert base64.b64decode(content.content) == b"agents:\n  claude-code: {}\n"  # type: ignore[union-attr]
    roles = {}
    for login in ["ada", "maria", "wes", "tia", "rita", "nobody"]:
        perm = gh.rest.repos.get_collaborator_permission_level(OWNER, REPO, login).parsed_data
        roles[login] = (perm.permission, perm.role_name)
    assert roles == {
        "ada": ("admin", "admin"),
        "maria": ("write", "maintain"),
        "wes": ("write", "write"),
        "tia": ("read", "triage"),
        "rita": ("read", "read"),
        "nobody": ("read", "read"),  # public repository: everyone can read
    }
    with pytest.raises(RequestFailed) as exc:
        gh.rest.repos.get_collaborator_permission_level(OWNER, REPO, "no-such-user")
    assert exc.value.response.status_code == 404


def test_issue_comments_labels_round_trip(world: World) -> None:
    world.post(f"/repos/{OWNER}/{REPO}/issues", {"title": "Add a widget", "user": "maria", "body": "please"})
    gh = GitHub(TokenAuthStrategy(world.token()), base_url=world.url)
    issue = gh.rest.issues.get(OWNER, REPO, 1).parsed_data
    assert issue.title == "Add a widget"
    assert issue.user is not None
    assert issue.user.login == "maria"
    created = gh.rest.issues.create_comment(OWNER, REPO, 1, body="<!-- baton:task=1 --> queued").parsed_data
    assert created.user is not None
    assert created.user.login == "baton-test[bot]"
    assert created.user.type == "Bot"
    updated = gh.rest.issues.update_comment(OWNER, REPO, created.id, body="<!-- baton:task=1 --> running")
    assert updated.parsed_data.body == "<!-- baton:task=1 --> running"
    comments = gh.rest.issues.list_comments(OWNER, REPO, 1).parsed_data
    assert [c.body for c in comments] == ["<!-- baton:task=1 --> running"]
    labels = gh.rest.issues.add_labels(OWNER, REPO, 1, data={"labels": ["agent:claude-code", "bug"]})
    assert sorted(lb.name for lb in labels.parsed_data) == ["agent:claude-code", "bug"]
    remaining = gh.rest.issues.remove_label(OWNER, REPO, 1, "bug").parsed_data
    assert [lb.name for lb in remaining] == ["agent:claude-code"]
    with pytest.raises(RequestFailed) as exc:
        gh.rest.issues.remove_label(OWNER, REPO, 1, "bug")
    assert exc.value.response.status_code == 404


def test_pulls_and_check_runs_parse(world: World) -> None:
    world.post(f"/repos/{OWNER}/{REPO}/commits", {"branch": "agent/1", "files": {"src/new.py": "x = 1\n"}})
    gh = GitHub(TokenAuthStrategy(world.token()), base_url=world.url)
    pull = gh.rest.pulls.create(OWNER, REPO, title="Agent PR", head="agent/1", base="main").parsed_data
    assert pull.number == 1
    assert pull.head.ref == "agent/1"
    assert pull.base.sha == world.head_sha
    again = gh.rest.pulls.get(OWNER, REPO, pull.number).parsed_data
    assert again.head.sha == pull.head.sha
    assert again.changed_files == 1
    assert again.additions == 1
    files = gh.rest.pulls.list_files(OWNER, REPO, pull.number).parsed_data
    assert [(f.filename, f.status) for f in files] == [("src/new.py", "added")]
    run = gh.rest.checks.create(
        OWNER, REPO, name="baton/merge-gate", head_sha=pull.head.sha, status="in_progress", external_id="t-1"
    ).parsed_data
    assert run.status == "in_progress"
    assert run.app is not None
    assert run.app.id == world.app_id
    assert [p.number for p in run.pull_requests] == [pull.number]
    done = gh.rest.checks.update(
        OWNER,
        REPO,
        run.id,
        status="completed",
        conclusion="neutral",
        output={"title": "No gates", "summary": "No gates are configured yet."},
    ).parsed_data
    assert done.conclusion == "neutral"
    assert done.completed_at is not None
    assert (
        gh.rest.checks.get(OWNER, REPO, run.id).parsed_data.output.summary == "No gates are configured yet."
    )
    listed = gh.rest.checks.list_for_ref(OWNER, REPO, "agent/1").parsed_data
    assert listed.total_count == 1
    assert listed.check_runs[0].id == run.id


def test_narrowed_installation_auth_through_githubkit(world: World) -> None:
    app = _app(world)
    narrowed = app.with_auth(
        app.auth.as_installation(world.installation_id, repositories=[REPO], permissions={"issues": "read"})
    )
    assert narrowed.rest.repos.get(OWNER, REPO).parsed_data.name == REPO
    with pytest.raises(RequestFailed) as hidden:
        narrowed.rest.repos.get(OWNER, "secret-sauce")
    assert hidden.value.response.status_code == 404
    token = app.rest.apps.create_installation_access_token(
        world.installation_id, repositories=[REPO], permissions={"checks": "write"}
    ).parsed_data
    assert token.repository_selection == "selected"
    assert token.repositories is not None
    assert [r.full_name for r in token.repositories] == [f"{OWNER}/{REPO}"]


def test_branch_parses_with_githubkit_and_tracks_the_head(world: World) -> None:
    gh = GitHub(world.token(), base_url=world.url)
    branch = gh.rest.repos.get_branch(OWNER, REPO, "main").parsed_data
    assert branch.name == "main"
    assert branch.commit.sha == world.head_sha
    assert branch.commit.commit.message
    missing = httpx.get(
        f"{world.url}/repos/{OWNER}/{REPO}/branches/nope", headers={"Authorization": f"token {world.token()}"}
    )
    assert missing.status_code == 404


def test_reviews_and_review_comments_parse(world: World) -> None:
    world.post(
        f"/repos/{OWNER}/{REPO}/commits", {"branch": "agent/2", "files": {"src/new.py": "x = 1\ny = 2\n"}}
    )
    world.post(f"/repos/{OWNER}/{REPO}/pulls", {"title": "Agent PR", "user": "wes", "head": "agent/2"})
    gh = GitHub(TokenAuthStrategy(world.token()), base_url=world.url)
    review = gh.rest.pulls.create_review(
        OWNER,
        REPO,
        1,
        event="COMMENT",
        body="Two notes",
        comments=[{"path": "src/new.py", "line": 2, "body": "y?"}],
    ).parsed_data
    assert (review.state, review.body) == ("COMMENTED", "Two notes")
    assert [r.id for r in gh.rest.pulls.list_reviews(OWNER, REPO, 1).parsed_data] == [review.id]
    assert gh.rest.pulls.get_review(OWNER, REPO, 1, review.id).parsed_data.commit_id == review.commit_id
    (of_review,) = gh.rest.pulls.list_comments_for_review(OWNER, REPO, 1, review.id).parsed_data
    (listed,) = gh.rest.pulls.list_review_comments(OWNER, REPO, 1).parsed_data
    assert of_review.id == listed.id
    assert (listed.path, listed.line, listed.side) == ("src/new.py", 2, "RIGHT")
    reply = gh.rest.pulls.create_reply_for_review_comment(
        OWNER, REPO, 1, listed.id, body="Because."
    ).parsed_data
    assert reply.in_reply_to_id == listed.id
    assert reply.user is not None
    assert reply.user.login == "baton-test[bot]"
    single = gh.rest.pulls.create_review_comment(
        OWNER, REPO, 1, body="x", commit_id=review.commit_id, path="src/new.py", line=1
    ).parsed_data
    assert gh.rest.pulls.get_review_comment(OWNER, REPO, single.id).parsed_data.body == "x"
    edited = gh.rest.pulls.update_review_comment(OWNER, REPO, single.id, body="x, edited").parsed_data
    assert edited.body == "x, edited"
    with pytest.raises(RequestFailed) as off_diff:
        gh.rest.pulls.create_review_comment(
            OWNER, REPO, 1, body="x", commit_id=review.commit_id, path="README.md", line=1
        )
    assert off_diff.value.response.status_code == 422


def test_sub_issues_parse(world: World) -> None:
    """An umbrella (#1) and two tasks, linked by the tasks' ids, reordered, read back, unlinked."""
    made = [world.post(f"/repos/{OWNER}/{REPO}/issues", {"title": f"#{n}", "user": "maria"})["id"]
            for n in range(1, 4)]  # fmt: skip
    gh = GitHub(TokenAuthStrategy(world.token()), base_url=world.url)
    parent = gh.rest.issues.add_sub_issue(OWNER, REPO, 1, sub_issue_id=made[1]).parsed_data
    assert parent.sub_issues_summary is not None
    assert parent.sub_issues_summary.total == 1
    gh.rest.issues.add_sub_issue(OWNER, REPO, 1, sub_issue_id=made[2])
    moved = gh.rest.issues.reprioritize_sub_issue(OWNER, REPO, 1, sub_issue_id=made[2], before_id=made[1])
    assert moved.parsed_data.number == 1
    listed = gh.rest.issues.list_sub_issues(OWNER, REPO, 1).parsed_data
    assert [i.number for i in listed] == [3, 2]
    up = gh.rest.issues.get_parent(OWNER, REPO, 2).parsed_data
    assert up.id == made[0]
    child = gh.rest.issues.get(OWNER, REPO, 2).parsed_data
    assert child.parent_issue_url == f"{world.url}/repos/{OWNER}/{REPO}/issues/1"
    left = gh.rest.issues.remove_sub_issue(OWNER, REPO, 1, sub_issue_id=made[1]).parsed_data
    assert left.sub_issues_summary is not None
    assert left.sub_issues_summary.total == 1


def test_merges_parse(world: World) -> None:
    """A pull merged by squash through githubkit, then read back as merged."""
    world.post(f"/repos/{OWNER}/{REPO}/commits", {"branch": "agent/3", "files": {"src/m.py": "m = 1\n"}})
    gh = GitHub(TokenAuthStrategy(world.token()), base_url=world.url)
    pull = gh.rest.pulls.create(OWNER, REPO, title="Agent PR", head="agent/3", base="main").parsed_data
    with pytest.raises(RequestFailed) as not_yet:
        gh.rest.pulls.check_if_merged(OWNER, REPO, pull.number)
    assert not_yet.value.response.status_code == 404
    result = gh.rest.pulls.merge(
        OWNER, REPO, pull.number, merge_method="squash", sha=pull.head.sha
    ).parsed_data
    assert result.merged is True
    assert result.message == "Pull Request successfully merged"
    assert gh.rest.pulls.check_if_merged(OWNER, REPO, pull.number).status_code == 204
    answer = gh.rest.pulls.get(OWNER, REPO, pull.number)
    merged = answer.parsed_data
    assert (merged.state, merged.merged) == ("closed", True)
    assert answer.json()["merge_commit_sha"] == result.sha  # githubkit's 2026-03-10 model has no such field
    assert merged.merged_by is not None
    assert merged.merged_by.login == "baton-test[bot]"
    assert merged.merged_at is not None
    commit = gh.rest.repos.get_commit(OWNER, REPO, result.sha).parsed_data
    assert commit.committer is not None
    assert commit.committer.login == "web-flow"  # type: ignore[union-attr]
    assert gh.rest.repos.get_branch(OWNER, REPO, "main").parsed_data.commit.sha == result.sha
    with pytest.raises(RequestFailed) as again:
        gh.rest.pulls.merge(OWNER, REPO, pull.number)
    assert again.value.response.status_code == 405

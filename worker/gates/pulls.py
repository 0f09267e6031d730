"""The pull request as GitHub has it now: what the merge gate judges, and checks again before it claims."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from githubkit import GitHub

from worker.github import api


@dataclass(frozen=True)
class Pull:
    number: int
    state: str
    head_sha: str
    head_ref: str
    base_ref: str
    fork: bool
    author: str
    author_type: str
    html_url: str = ""
    #: Untrusted text (the merge gate's reviewer reads it as data; nothing decides on it).
    title: str = ""
    body: str = ""

    @classmethod
    def from_api(cls, data: dict[str, Any], full_name: str) -> Pull:
        head, base = data["head"], data["base"]
        head_repo = (head.get("repo") or {}).get("full_name")
        return cls(
            int(data["number"]),
            str(data["state"]),
            str(head["sha"]),
            str(head["ref"]),
            str(base["ref"]),
            head_repo != full_name,
            str(data["user"]["login"]),
            str(data["user"].get("type", "User")),
            str(data.get("html_url") or ""),
            str(data.get("title") or ""),
            str(data.get("body") or ""),
        )


def pull(gh: GitHub[Any], full_name: str, number: int) -> Pull:
    return Pull.from_api(api.request(gh, "GET", f"{api.repo_path(full_name)}/pulls/{number}"), full_name)


def find_pull(gh: GitHub[Any], full_name: str, head_sha: str) -> int | None:
    """The open pull request whose head is ``head_sha`` (check-run events from forks name none)."""
    for page in range(1, 11):
        found = api.request(
            gh,
            "GET",
            f"{api.repo_path(full_name)}/pulls",
            params={"state": "open", "per_page": 100, "page": page},
        )
        for item in found:
            if item["head"]["sha"] == head_sha:
                return int(item["number"])
        if len(found) < 100:
            return None
    return None

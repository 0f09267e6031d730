"""Cut the parts of GitHub's published schemas that the emulator's shape tests check against.

Two npm packages describe what GitHub sends, and the tests check the emulator against both:

* ``@octokit/openapi`` (``generated/api.github.com.json``): GitHub's OpenAPI description of
  the REST API. Kept: the operations in ``OPERATIONS`` and every component they reach.
* ``@octokit/webhooks-schemas`` (``schema.json``): JSON schemas of webhook payloads,
  one per event and action. Kept: every action of the events in ``EVENTS`` and the
  definitions they reach.

Events the community schemas (7.6.1, their last release) predate, such as ``sub_issues``,
are checked against GitHub's own webhook schemas in the OpenAPI description instead
(its ``x-webhooks``): the ones in ``OPENAPI_WEBHOOKS`` are kept with the operations.

Both are far too large to vendor whole (13 MB and 630 KB) and the suite runs offline, so
this writes the reachable parts, unchanged, to ``tests/fixtures/github/``::

    cd "$(mktemp -d)" && npm pack @octokit/openapi@23.0.2 @octokit/webhooks-schemas@7.6.1
    python scripts/github_schemas.py THAT_DIR          # rewrite the two fixtures
    python scripts/github_schemas.py THAT_DIR --check  # exit 1 if they differ

A new operation or event under test is added to the lists here, then the fixtures are cut again.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "github"
OPENAPI_PACKAGE = ("octokit-openapi-23.0.2.tgz", "package/generated/api.github.com.json")
WEBHOOKS_PACKAGE = ("octokit-webhooks-schemas-7.6.1.tgz", "package/schema.json")

#: (method, path) of every REST operation whose answers the shape tests check.
OPERATIONS: list[tuple[str, str]] = [
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}"),
    ("get", "/repos/{owner}/{repo}/issues/comments/{comment_id}"),
    ("patch", "/repos/{owner}/{repo}/issues/comments/{comment_id}"),
    ("post", "/repos/{owner}/{repo}/check-runs/{check_run_id}/rerequest"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews"),
    ("post", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}/comments"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}/comments"),
    ("post", "/repos/{owner}/{repo}/pulls/{pull_number}/comments"),
    ("get", "/repos/{owner}/{repo}/pulls/comments/{comment_id}"),
    ("patch", "/repos/{owner}/{repo}/pulls/comments/{comment_id}"),
    ("post", "/repos/{owner}/{repo}/pulls/{pull_number}/comments/{comment_id}/replies"),
    ("get", "/repos/{owner}/{repo}/issues"),
    ("post", "/repos/{owner}/{repo}/issues"),
    ("get", "/repos/{owner}/{repo}/issues/{issue_number}"),
    ("get", "/repos/{owner}/{repo}/issues/{issue_number}/sub_issues"),
    ("post", "/repos/{owner}/{repo}/issues/{issue_number}/sub_issues"),
    ("delete", "/repos/{owner}/{repo}/issues/{issue_number}/sub_issue"),
    ("patch", "/repos/{owner}/{repo}/issues/{issue_number}/sub_issues/priority"),
    ("get", "/repos/{owner}/{repo}/issues/{issue_number}/parent"),
    ("put", "/repos/{owner}/{repo}/pulls/{pull_number}/merge"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}/merge"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}/commits"),
    ("get", "/repos/{owner}/{repo}/commits/{ref}"),
]

#: ``x-webhooks`` entries of the OpenAPI description kept for events the community schemas lack
#: (``<event>-<action>`` with dashes, as GitHub names them there).
OPENAPI_WEBHOOKS = [
    "sub-issues-parent-issue-added",
    "sub-issues-parent-issue-removed",
    "sub-issues-sub-issue-added",
    "sub-issues-sub-issue-removed",
]

#: Every event the emulator sends (all of each event's actions are kept).
EVENTS = [
    "check_run",
    "check_suite",
    "fork",
    "installation",
    "installation_repositories",
    "issue_comment",
    "issues",
    "ping",
    "pull_request",
    "pull_request_review",
    "pull_request_review_comment",
    "push",
    "repository",
]


def _refs(node: Any) -> Iterator[str]:
    """Every ``$ref`` string anywhere under ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def _closure(document: dict[str, Any], roots: list[Any]) -> set[str]:
    """The local ``#/a/b`` pointers reachable from ``roots`` within ``document``."""
    seen: set[str] = set()
    todo = [ref for root in roots for ref in _refs(root)]
    while todo:
        ref = todo.pop()
        if ref in seen:
            continue
        if not ref.startswith("#/"):
            raise ValueError(f"{ref}: only local references are expected")
        seen.add(ref)
        target: Any = document
        for part in ref[2:].split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        todo.extend(_refs(target))
    return seen


def cut_openapi(spec: dict[str, Any]) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for method, path in OPERATIONS:
        operation = spec["paths"][path][method]
        paths.setdefault(path, {})[method] = {
            key: operation[key]
            for key in ("operationId", "parameters", "requestBody", "responses")
            if key in operation
        }
    hooks: dict[str, Any] = {}
    for name in OPENAPI_WEBHOOKS:
        operation = spec["x-webhooks"][name]["post"]
        hooks[name] = {"post": {key: operation[key] for key in ("operationId", "requestBody")}}
    components: dict[str, dict[str, Any]] = {}
    for ref in sorted(_closure(spec, [*paths.values(), *hooks.values()])):
        _, section, kind, name = ref.split("/", 3)
        if section != "components":
            raise ValueError(f"{ref}: only components are expected")
        components.setdefault(kind, {})[name] = spec["components"][kind][name]
    return {
        "openapi": spec["openapi"],
        "info": {"title": spec["info"]["title"], "version": spec["info"]["version"]},
        "paths": paths,
        "x-webhooks": hooks,
        "components": {kind: dict(sorted(items.items())) for kind, items in sorted(components.items())},
    }


def cut_webhooks(schema: dict[str, Any]) -> dict[str, Any]:
    definitions = schema["definitions"]
    wanted = sorted(name for name in definitions if name.split("$", 1)[0] in EVENTS and "$" in name)
    keep = set(wanted) | {
        ref.removeprefix("#/definitions/") for ref in _closure(schema, [definitions[n] for n in wanted])
    }
    return {"$schema": schema["$schema"], "definitions": {name: definitions[name] for name in sorted(keep)}}


def _read(directory: Path, package: tuple[str, str]) -> dict[str, Any]:
    tarball, member = package
    with tarfile.open(directory / tarball) as archive:
        handle = archive.extractfile(member)
        if handle is None:
            raise FileNotFoundError(f"{tarball}: no {member}")
        data: dict[str, Any] = json.load(handle)
        return data


def _text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=False, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("packages", type=Path, help="the directory `npm pack` wrote the two tarballs to")
    parser.add_argument("--check", action="store_true", help="exit 1 if the fixtures differ from a new cut")
    args = parser.parse_args(argv)
    outputs = {
        OUT / "openapi.json": _text(cut_openapi(_read(args.packages, OPENAPI_PACKAGE))),
        OUT / "webhooks-schemas.json": _text(cut_webhooks(_read(args.packages, WEBHOOKS_PACKAGE))),
    }
    stale = [path for path, text in outputs.items() if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(
                f"{path.relative_to(ROOT)} differs from a new cut: run python scripts/github_schemas.py DIR"
            )
        return 1 if stale else 0
    OUT.mkdir(parents=True, exist_ok=True)
    for path, text in outputs.items():
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)} ({len(text) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

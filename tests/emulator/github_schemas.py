"""Check the emulator's answers and webhook payloads against GitHub's published schemas.

The schemas are the parts of ``@octokit/openapi`` 23.0.2 and ``@octokit/webhooks-schemas``
7.6.1 vendored in ``tests/fixtures/github/`` (cut by ``scripts/github_schemas.py``; the
suite runs offline). Each check returns the violations as readable lines, so a failing
test names the field, not just "invalid".

REST answers are checked as the OpenAPI description allows them: required properties,
types (``nullable`` read as OpenAPI 3.0 means it), enums; extra properties are allowed,
as the description allows them. Webhook payloads are checked strictly, extra properties
refused as the webhook schemas refuse them, except the few in ``NEWER_THAN_THE_SCHEMA``:
properties GitHub sends that the 7.6.1 schemas predate, each with where GitHub itself
describes it.

An event the community schemas do not have at all (``sub_issues``: 7.6.1 is their last
release and predates it) is checked against GitHub's own webhook schema for it, the
OpenAPI description's ``x-webhooks`` entry, just as strictly: every object that lists its
properties is read as closed, so a property the description does not name is refused.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft4Validator, Draft7Validator, ValidationError
from jsonschema.exceptions import best_match

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "github"

#: Property -> where GitHub's own OpenAPI description (23.0.2) has it, for webhook objects whose
#: community schema (7.6.1) refuses unknown properties. Anything else extra is a failure.
NEWER_THAN_THE_SCHEMA: dict[str, str] = {
    "user_view_type": "components/schemas/simple-user (every user object)",
    "client_id": "components/schemas/integration and installation",
    "installations_count": "components/schemas/integration",
    "rerequestable": "components/schemas/webhook-check-suite-rerequested check_suite",
    "runs_rerequestable": "components/schemas/webhook-check-suite-rerequested check_suite",
    "sub_issues_summary": "components/schemas/webhooks_issue and webhook-issues-* issue (every issue object)",
    # Not in 23.0.2: githubkit's models of API version 2026-03-10 require them on a label.
    "archived_at": "githubkit 2026-03-10 label model",
    "archived_by": "githubkit 2026-03-10 label model",
}
#: Top-level payload properties GitHub's OpenAPI webhook schemas have and the community ones lack.
NEWER_AT_TOP_LEVEL: dict[str, set[str]] = {
    # components/schemas/webhook-installation-repositories-added (and -removed) list it.
    "installation_repositories": {"organization"},
}


@functools.cache
def _webhooks() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / "webhooks-schemas.json").read_text())
    return data


@functools.cache
def _openapi() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / "openapi.json").read_text())
    return data


def _describe(error: ValidationError) -> str:
    """``path/to/field: what is wrong``; for a ``oneOf``/``anyOf``, the closest alternative's reason."""
    if error.context:
        error = best_match(error.context)
    where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
    return f"{where}: {error.message[:300]}"


def _tolerant(node: Any) -> Any:
    """The schema with every ``NEWER_THAN_THE_SCHEMA`` property allowed where extras are refused."""
    if isinstance(node, list):
        return [_tolerant(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _tolerant(value) for key, value in node.items()}
    if out.get("additionalProperties") is False:
        out["properties"] = {**{name: {} for name in NEWER_THAN_THE_SCHEMA}, **out.get("properties", {})}
    return out


@functools.cache
def _webhook_validator(event: str, key: str) -> Draft7Validator:
    definitions = _tolerant(_webhooks()["definitions"])
    top = definitions[key]
    top["properties"] = {**{name: {} for name in NEWER_AT_TOP_LEVEL.get(event, set())}, **top["properties"]}
    return Draft7Validator({"definitions": definitions, "$ref": f"#/definitions/{key}"})


def webhook_errors(event: str, payload: dict[str, Any]) -> list[str]:
    """Where ``payload`` breaks the schema of ``event`` and its ``action`` (empty: it fits).

    The community schema when it has the event, else GitHub's OpenAPI one (``x-webhooks``).
    """
    action = payload.get("action")
    key = f"{event}${action}" if isinstance(action, str) else f"{event}$event"
    if key in _webhooks()["definitions"]:
        return sorted(_describe(e) for e in _webhook_validator(event, key).iter_errors(payload))
    hook = f"{event}-{action}".replace("_", "-")
    if isinstance(action, str) and hook in _openapi().get("x-webhooks", {}):
        return sorted(_describe(e) for e in _openapi_webhook_validator(hook).iter_errors(payload))
    return [f"no schema for {key} (add the event to scripts/github_schemas.py)"]


def _nullable(node: Any) -> Any:
    """OpenAPI 3.0's ``nullable: true`` as JSON Schema (a ``null`` type or a ``null`` alternative)."""
    if isinstance(node, list):
        return [_nullable(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {
        key: _nullable(value) for key, value in node.items() if key not in {"nullable", "example", "examples"}
    }
    if node.get("nullable") is True:
        if "type" in out:
            out["type"] = [out["type"], "null"]
            if "enum" in out:
                out["enum"] = [*out["enum"], None]
        else:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


@functools.cache
def _components() -> dict[str, Any]:
    converted: dict[str, Any] = _nullable(copy.deepcopy(_openapi()["components"]))
    return converted


def _closed(node: Any) -> Any:
    """Every object schema that lists its properties, closed (``additionalProperties: false``).

    Left open where a combination (``allOf``) spreads one object's properties over parts.
    """
    if isinstance(node, list):
        return [_closed(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _closed(value) for key, value in node.items() if key != "allOf"}
    if "allOf" in node:
        out["allOf"] = node["allOf"]
    elif "properties" in node and "additionalProperties" not in node:
        out["additionalProperties"] = False
    return out


@functools.cache
def _openapi_webhook_validator(hook: str) -> Draft4Validator:
    """GitHub's own schema of one webhook (``x-webhooks``), closed as the community schemas are."""
    body = _openapi()["x-webhooks"][hook]["post"]["requestBody"]["content"]["application/json"]["schema"]
    root = {"components": _closed(_components()), **_closed(_nullable(body))}
    return Draft4Validator(root)


def openapi_webhooks() -> list[str]:
    """The ``x-webhooks`` entries the vendored description holds."""
    return sorted(_openapi().get("x-webhooks", {}))


def operations() -> list[tuple[str, str]]:
    """(METHOD, path) of every operation the vendored description holds."""
    return sorted((m.upper(), p) for p, ops in _openapi()["paths"].items() for m in ops)


def response_schema(method: str, path: str, status: int) -> dict[str, Any] | None:
    """The JSON schema GitHub documents for that answer (None: documented with no body)."""
    spec = _openapi()
    operation = spec["paths"][path][method.lower()]
    responses = operation["responses"]
    if str(status) not in responses:
        raise AssertionError(f"{method} {path} documents no {status} answer, only {sorted(responses)}")
    response = responses[str(status)]
    if "$ref" in response:
        response = spec["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
    content = response.get("content", {}).get("application/json")
    return None if content is None else dict(content["schema"])


def rest_errors(method: str, path: str, status: int, body: Any) -> list[str]:
    """Where an answer (``status``, JSON ``body``) breaks GitHub's description of ``METHOD path``.

    ``path`` is the template as the description writes it (``/repos/{owner}/{repo}/…``).
    """
    schema = response_schema(method, path, status)
    if schema is None:
        return [] if body in (None, b"", "") else [f"documented with no body, got {body!r:.200}"]
    root = {"components": _components(), **_nullable(schema)}
    return sorted(_describe(e) for e in Draft4Validator(root).iter_errors(body))

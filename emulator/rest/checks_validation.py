"""GitHub's validation of check-run requests, as pure functions on the request body.

Two kinds of 422, worded as GitHub words them:

* schema violations (too many items, too many characters, missing fields):
  ``{"message": "Invalid request.\\n\\n<detail>"}``, e.g. ``Only 65535 characters
  are allowed; 65536 were supplied.`` or ``No more than 50 items are allowed;
  51 were supplied.``;
* semantic ones (``Validation Failed`` with ``errors``), e.g. a summary under
  65,535 characters but over 65,535 UTF-8 bytes: ``summary exceeds a maximum
  bytesize of 65535``.
"""

from __future__ import annotations

from typing import Any

from emulator.errors import ApiError, invalid_request, validation_failed

MAX_OUTPUT_CHARS = 65535
MAX_ANNOTATIONS = 50
MAX_ACTIONS = 3
MAX_ACTION_LABEL = 20
MAX_ACTION_IDENTIFIER = 20
MAX_ACTION_DESCRIPTION = 40
STATUSES = ("queued", "in_progress", "completed")
CONCLUSIONS = ("action_required", "cancelled", "failure", "neutral", "success", "skipped", "timed_out")
ANNOTATION_LEVELS = ("notice", "warning", "failure")
CREATE_DOCS = "https://docs.github.com/rest/checks/runs#create-a-check-run"
UPDATE_DOCS = "https://docs.github.com/rest/checks/runs#update-a-check-run"


def _missing(names: list[str], docs: str) -> ApiError:
    quoted = ", ".join(f'"{n}"' for n in sorted(names))
    verb = "wasn't" if len(names) == 1 else "weren't"
    return invalid_request(f"{quoted} {verb} supplied.", docs)


def _too_long(value: Any, limit: int, docs: str) -> None:
    if isinstance(value, str) and len(value) > limit:
        raise invalid_request(f"Only {limit} characters are allowed; {len(value)} were supplied.", docs)


def _too_many(value: Any, limit: int, docs: str) -> None:
    if isinstance(value, list) and len(value) > limit:
        raise invalid_request(f"No more than {limit} items are allowed; {len(value)} were supplied.", docs)


def _check_string(body: dict[str, Any], key: str, docs: str) -> None:
    if key in body and body[key] is not None and not isinstance(body[key], str):
        raise invalid_request(f"For 'properties/{key}', {body[key]!r} is not a string.", docs)


def _annotation(item: Any, docs: str) -> None:
    if not isinstance(item, dict):
        raise invalid_request("For 'items', value is not an object.", docs)
    needed = ["path", "start_line", "end_line", "annotation_level", "message"]
    missing = [n for n in needed if item.get(n) is None]
    if missing:
        raise _missing(missing, docs)
    if item["annotation_level"] not in ANNOTATION_LEVELS:
        raise invalid_request(
            f"For 'properties/annotation_level', \"{item['annotation_level']}\" is not a possible value.",
            docs,
        )
    for key in ("start_line", "end_line"):
        if not isinstance(item[key], int) or isinstance(item[key], bool):
            raise invalid_request(f"For 'properties/{key}', {item[key]!r} is not an integer.", docs)
    has_columns = item.get("start_column") is not None or item.get("end_column") is not None
    if has_columns and item["start_line"] != item["end_line"]:
        # Columns are only allowed on single-line annotations.
        raise validation_failed([{"resource": "CheckRun", "code": "invalid", "field": "annotations"}], docs)


def _action(item: Any, docs: str) -> None:
    if not isinstance(item, dict):
        raise invalid_request("For 'items', value is not an object.", docs)
    missing = [n for n in ("label", "description", "identifier") if not isinstance(item.get(n), str)]
    if missing:
        raise _missing(missing, docs)
    _too_long(item["label"], MAX_ACTION_LABEL, docs)
    _too_long(item["description"], MAX_ACTION_DESCRIPTION, docs)
    _too_long(item["identifier"], MAX_ACTION_IDENTIFIER, docs)


def _output(output: Any, docs: str) -> None:
    if not isinstance(output, dict):
        raise invalid_request("For 'properties/output', value is not an object.", docs)
    missing = [n for n in ("title", "summary") if not isinstance(output.get(n), str)]
    if missing:
        raise _missing(missing, docs)
    for key in ("summary", "text"):
        _too_long(output.get(key), MAX_OUTPUT_CHARS, docs)
    annotations = output.get("annotations")
    if annotations is not None:
        if not isinstance(annotations, list):
            raise invalid_request("For 'properties/annotations', value is not an array.", docs)
        _too_many(annotations, MAX_ANNOTATIONS, docs)
        for item in annotations:
            _annotation(item, docs)
    for key in ("summary", "text"):
        value = output.get(key)
        if isinstance(value, str) and len(value.encode("utf-8")) > MAX_OUTPUT_CHARS:
            raise validation_failed(
                [
                    {
                        "resource": "CheckRun",
                        "code": "custom",
                        "field": key,
                        "message": f"{key} exceeds a maximum bytesize of {MAX_OUTPUT_CHARS}",
                    }
                ],
                docs,
            )


def validate(body: dict[str, Any], *, creating: bool) -> None:
    """Raise GitHub's 422 for the first rule ``body`` breaks; return if it is acceptable."""
    docs = CREATE_DOCS if creating else UPDATE_DOCS
    if creating:
        missing = [n for n in ("name", "head_sha") if not isinstance(body.get(n), str) or not body.get(n)]
        if missing:
            raise _missing(missing, docs)
    for key in ("name", "details_url", "external_id", "started_at", "completed_at"):
        _check_string(body, key, docs)
    status = body.get("status")
    if status is not None and status not in STATUSES:
        raise invalid_request(f"For 'properties/status', \"{status}\" is not a possible value.", docs)
    conclusion = body.get("conclusion")
    if conclusion is not None and conclusion not in CONCLUSIONS:
        raise invalid_request(f"For 'properties/conclusion', \"{conclusion}\" is not a possible value.", docs)
    if conclusion is None and (status == "completed" or body.get("completed_at") is not None):
        raise invalid_request('"conclusion" wasn\'t supplied.', docs)
    if "output" in body and body["output"] is not None:
        _output(body["output"], docs)
    actions = body.get("actions")
    if actions is not None:
        if not isinstance(actions, list):
            raise invalid_request("For 'properties/actions', value is not an array.", docs)
        _too_many(actions, MAX_ACTIONS, docs)
        for item in actions:
            _action(item, docs)

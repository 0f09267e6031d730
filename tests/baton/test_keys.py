"""Every Redis key name is spelled in ``baton/keys.py`` and nowhere else, once each, unchanged.

A key spelled in two modules drifts apart without a test noticing; a key renamed orphans what a
deployment already stored. ``evidence`` is outside the scan: it may not import ``baton`` (see
``tests/test_layering.py``) and keeps its own ``baton:log:*`` and ``baton:audit:*`` names.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from baton import keys
from evidence import audit, log

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("baton", "bot", "worker", "demo", "emulator")
HOME = "baton/keys.py"
#: A Redis name: a string that starts ``baton:`` and a name character (not prose such as
#: "baton: commit", a docstring that mentions a key, or the status comment's ``<!-- baton:status``).
_KEY = re.compile(r"baton:[A-Za-z0-9_-]")

#: The stored names, pinned: changing one here is a data migration, not a rename.
STORED = {
    "TASK_PREFIX": "baton:task:",
    "REGISTRY_PREFIX": "baton:tasks:",
    "LEASES_KEY": "baton:leases",
    "OUTBOX_KEY": "baton:outbox",
    "LOST_JOBS_KEY": "baton:lost-jobs",
    "DUTY_PREFIX": "baton:duty:",
    "DELIVERY_PREFIX": "baton:delivery:",
    "PAYLOAD_PREFIX": "baton:payload:",
    "COUNTERS_KEY": "baton:counters",
    "GITHUB_REQUESTS_KEY": "baton:github-requests",
    "BOX_PROBES_KEY": "baton:box-probes",
    "RUN_LOCK_PREFIX": "baton:run-lock:",
    "RUN_RECORD_PREFIX": "baton:run:",
    "BUDGET_PREFIX": "baton:budget:",
    "ACTIVE_PREFIX": "baton:active:",
    "CANCEL_PREFIX": "baton:cancel:",
    "LINE_PREFIX": "baton:line:",
    "LINE_ENTRY_PREFIX": "baton:line-entry:",
    "LINES_KEY": "baton:lines",
    "UMBRELLA_PREFIX": "baton:umbrella:",
    "UMBRELLA_OF_PREFIX": "baton:umbrella-of:",
    "UMBRELLA_PULL_PREFIX": "baton:umbrella-pull:",
    "UMBRELLA_LOCK_PREFIX": "baton:umbrella-lock:",
    "UMBRELLA_VERIFY_PREFIX": "baton:umbrella-verify:",
    "APP_BOT_PREFIX": "baton:app-bot:",
    "DECISION_PREFIX": "baton:decision:",
    "LAST_RUN_PREFIX": "baton:last-run:",
    "POLICY_PREFIX": "baton:policy:",
    "RECEIPTS_PREFIX": "baton:receipts:",
    "ISSUE_PREFIX": "baton:issue:",
    "ISSUE_LOCK_PREFIX": "baton:issue-lock:",
    "ISSUE_UNHEARD_PREFIX": "baton:issue-unheard:",
    "GATE_RESULT_PREFIX": "baton:gate-result:",
    "GATE_LOCK_PREFIX": "baton:gate-lock:",
    "GATE_APPROVAL_PREFIX": "baton:gate-approval:",
    "CONFIG_PREFIX": "baton:config:",
    "ORG_VISIBILITY_PREFIX": "baton:org-visibility:",
    "GITHUB_TOKENS_PREFIX": "baton:github",
    "ETAG_PREFIX": "baton:etag:",
    "REDELIVERY_LOCK_KEY": "baton:redelivery:lock",
    "REDELIVERY_STATE_KEY": "baton:redelivery:state",
    "REDELIVERY_GUID_PREFIX": "baton:redelivery:guid:",
    "REDELIVERY_GIVEN_UP_KEY": "baton:redelivery:given-up",
    "DOCTOR_PROBE_PREFIX": "baton:doctor:",
    "REPLICATION_MARK_KEY": "baton:replication-mark",
    "PRIMARY_KEY": "baton:primary",
}


def _names() -> dict[str, str]:
    return {n: v for n, v in vars(keys).items() if n.isupper() and isinstance(v, str)}


def _literals(path: Path) -> list[str]:
    """Each string constant (f-string parts included) that names a ``baton:`` key, with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _KEY.match(node.value):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    return found


def test_no_module_but_keys_spells_a_key() -> None:
    stray = [
        hit
        for package in SCANNED
        for path in sorted((ROOT / package).rglob("*.py"))
        if str(path.relative_to(ROOT)) != HOME
        for hit in _literals(path)
    ]
    assert stray == [], "move these names into baton/keys.py and import them from there"


def test_the_stored_names_are_unchanged() -> None:
    assert _names() == STORED


def test_each_name_is_one_key() -> None:
    """No two constants share a value, and no prefix's SCAN (``prefix*``) also matches another key."""
    values = list(_names().values())
    assert len(values) == len(set(values))
    overlaps = [(p, k) for p in values if p.endswith(":") for k in values if k != p and k.startswith(p)]
    assert overlaps == []


def test_evidence_keeps_to_its_own_two_families() -> None:
    """``evidence`` spells its keys itself; they must not fall under any of Baton's, nor the reverse."""
    families = ("baton:log:", "baton:audit:")
    assert log.INSTALLATIONS.startswith(families[0])
    assert audit.INSTALLATIONS.startswith(families[1])
    assert audit.pending_key(7).startswith(families[1])
    assert audit.chain_key(7).startswith(families[1])
    values = _names().values()
    assert [v for v in values if v.startswith(families)] == []
    assert [(p, f) for p in values if p.endswith(":") for f in families if f.startswith(p)] == []

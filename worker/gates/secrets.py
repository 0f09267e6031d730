"""The "no secret-looking material added" gate's scanner, and the redactor for published output.

Precision over recall: only formats with a distinctive documented prefix (GitHub's
``ghp_``/``github_pat_``, AWS key IDs, PEM private key headers, Slack, Google, Stripe,
OpenAI, Anthropic, npm). No entropy guessing, because a gate that cries wolf on every
hash and UUID gets ignored, and a false finding blocks a merge.

Word boundaries are deliberate: a token must not be glued to a letter, digit or ``_`` on
either side, so ``xghp_…`` or ``my_ghp_…`` inside a longer identifier is not a token.

Findings name the kind, the path and the line, and at most a fixed, well-known prefix
(``ghp_``): the check run is public to everyone who can read the PR, so a finding must
never repeat the secret it found.

Work is bounded: each line is scanned in its first ``MAX_LINE_CHARS`` characters (a
minified 1 MB line must not stall the worker), and collection stops after
``MAX_FINDINGS``, which the result says through ``truncated``. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

MAX_LINE_CHARS = 4096
MAX_FINDINGS = 1000

# Not preceded / followed by an identifier character: the word boundary for every token.
_BEFORE = r"(?<![A-Za-z0-9_])"
_AFTER = r"(?![A-Za-z0-9_])"
# A PEM header counts only when key material can follow it: end of line, or an escaped
# newline (a JSON service-account file) then base64, a header field ("Proc-Type: ") or a blank
# line. `HEADER = "-----BEGIN … KEY-----"` in a parser, or "…KEY-----\\nnot a key" in a test, is not a key.
_PEM_HEADER = r"-----BEGIN (?:(?:RSA|EC|DSA|OPENSSH|PGP|ENCRYPTED) )?PRIVATE KEY(?: BLOCK)?-----"
_ESCAPED_NEWLINE = r"(?:\\r)?\\n"
_PEM_FOLLOWS = (
    rf"(?=[ \t\r]*$|{_ESCAPED_NEWLINE}(?:[A-Za-z0-9+/=]{{16}}|[A-Za-z][A-Za-z-]*: |{_ESCAPED_NEWLINE}))"
)
_PEM_END = r"-----END (?:(?:RSA|EC|DSA|OPENSSH|PGP|ENCRYPTED) )?PRIVATE KEY(?: BLOCK)?-----"


@dataclass(frozen=True, slots=True)
class _Kind:
    """One token format: its stable id, how a reviewer reads it, and its pattern."""

    kind: str
    label: str
    #: Fixed, public prefixes a description may show (longest first); also the cheap pre-check.
    prefixes: tuple[str, ...]
    pattern: re.Pattern[str]
    #: What redact() removes, when more than the scanned pattern (a PEM body, not just its header).
    redaction: re.Pattern[str] | None = None
    #: Substrings one of which every match contains, when the prefixes are not that.
    hints: tuple[str, ...] = ()

    def describe(self, matched: str) -> str:
        prefix = next((p for p in self.prefixes if matched.startswith(p)), None)
        return f"{self.label} ({prefix}…)" if prefix else self.label


_KINDS: tuple[_Kind, ...] = (
    _Kind(
        "private-key-block",
        "a private key block (-----BEGIN … PRIVATE KEY-----)",
        (),
        re.compile(_PEM_HEADER + _PEM_FOLLOWS),
        # To the END line, or to the end of the text when there is none: safer to lose output.
        re.compile(_PEM_HEADER + _PEM_FOLLOWS + r"(?s:.*?)(?:" + _PEM_END + r"|\Z)", re.MULTILINE),
        hints=("PRIVATE KEY",),
    ),
    # GitHub documents the prefixes; 36 is the classic length, refresh tokens are longer.
    _Kind(
        "github-token",
        "a GitHub token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        re.compile(_BEFORE + r"gh[pousr]_[A-Za-z0-9]{36,}" + _AFTER),
    ),
    _Kind(
        "github-fine-grained-token",
        "a GitHub fine-grained personal access token",
        ("github_pat_",),
        re.compile(_BEFORE + r"github_pat_[A-Za-z0-9_]{82,}" + _AFTER),
    ),
    # AWS's own documentation example (…EXAMPLE) sits in countless fixtures; it is not a key.
    _Kind(
        "aws-access-key-id",
        "an AWS access key ID",
        ("AKIA", "ASIA"),
        re.compile(_BEFORE + r"(?:AKIA|ASIA)(?![A-Z0-9]{9}EXAMPLE)[A-Z0-9]{16}" + _AFTER),
    ),
    # Bot (xoxb-digits-digits-secret), user/legacy (xoxp-d-d-d-hex): numeric groups, then a long part.
    _Kind(
        "slack-token",
        "a Slack token",
        ("xoxb-", "xoxa-", "xoxp-", "xoxr-", "xoxs-"),
        re.compile(_BEFORE + r"xox[baprs]-(?:[0-9]+-){1,4}[A-Za-z0-9]{16,}(?:-[A-Za-z0-9]+)*" + _AFTER),
    ),
    _Kind(
        "google-api-key",
        "a Google API key",
        ("AIza",),
        re.compile(_BEFORE + r"AIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"),
    ),
    _Kind(
        "stripe-secret-key",
        "a Stripe live secret key",
        ("sk_live_", "rk_live_"),
        re.compile(_BEFORE + r"[sr]k_live_[0-9A-Za-z]{24,}" + _AFTER),
    ),
    # "sk-" alone is everywhere (sk-learn, CSS classes), so only the typed prefixes with a long
    # body, or the legacy shape: exactly 48 letters and digits, no dashes (kebab-case never fits).
    _Kind(
        "openai-api-key",
        "an OpenAI API key",
        ("sk-proj-", "sk-svcacct-", "sk-admin-", "sk-"),
        re.compile(
            _BEFORE + r"sk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,}|[A-Za-z0-9]{48}(?![A-Za-z0-9_-]))"
        ),
    ),
    # sk-ant-<type><2 digits>-… (api03, admin01, oat01): the typed middle keeps "sk-ant-design-…" out.
    _Kind(
        "anthropic-api-key",
        "an Anthropic API key",
        ("sk-ant-",),
        re.compile(_BEFORE + r"sk-ant-[a-z]{2,10}[0-9]{2}-[A-Za-z0-9_-]{20,}"),
    ),
    _Kind(
        "npm-token",
        "an npm access token",
        ("npm_",),
        re.compile(_BEFORE + r"npm_[A-Za-z0-9]{36}" + _AFTER),
    ),
)

#: The stable ids a Finding's ``kind`` takes.
KINDS: tuple[str, ...] = tuple(k.kind for k in _KINDS)
# A substring test is far cheaper than a regex search, and nearly every line fails all of them:
# this is what keeps 100k added lines well under a second.
_HINTS: tuple[tuple[str, _Kind], ...] = tuple((h, k) for k in _KINDS for h in k.hints or k.prefixes)


@dataclass(frozen=True, slots=True)
class Finding:
    """Something secret-shaped on an added line: enough to find it, never the secret."""

    path: str
    line: int
    kind: str
    description: str

    def to_data(self) -> dict[str, object]:
        return {"path": self.path, "line": self.line, "kind": self.kind, "description": self.description}


@dataclass(frozen=True, slots=True)
class ScanResult:
    """The findings, and whether more were left out (a reviewer must know the list is partial)."""

    findings: tuple[Finding, ...]
    truncated: bool

    def to_data(self) -> dict[str, object]:
        return {"findings": [f.to_data() for f in self.findings], "truncated": self.truncated}


def scan_added_lines(path: str, added: Iterable[tuple[int, str]]) -> ScanResult:
    """For callers that already have one file's added lines (e.g. from the PR files API)."""
    return _scan((path, number, text) for number, text in added)


def scan_patch(patch: str) -> ScanResult:
    """Scan what a unified diff adds; removed and context lines are never the PR's doing."""
    return _scan(_added_lines(patch))


def redact(text: str) -> str:
    """Output published in a check run goes through here, so a leaked token is not republished."""
    for kind in _KINDS:  # the PEM block first: its body would otherwise be left half-redacted
        if any(hint in text for hint in kind.hints or kind.prefixes):
            text = (kind.redaction or kind.pattern).sub(f"[redacted {kind.kind}]", text)
    return text


def _scan(lines: Iterable[tuple[str, int, str]]) -> ScanResult:
    findings: list[Finding] = []
    for path, number, text in lines:
        if number < 1:
            raise ValueError(f"line numbers are 1-based, got {number} for {path!r}")
        head = text[:MAX_LINE_CHARS]
        candidates = {kind for hint, kind in _HINTS if hint in head}
        if not candidates:
            continue
        hits = sorted(
            (match.start(), kind.kind, kind.describe(match.group()))
            for kind in candidates
            if (match := kind.pattern.search(head))
        )
        for _, kind_id, description in hits:
            if len(findings) == MAX_FINDINGS:
                return ScanResult(tuple(findings), truncated=True)
            findings.append(Finding(path, number, kind_id, description))
    return ScanResult(tuple(findings), truncated=False)


_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _added_lines(patch: str) -> Iterator[tuple[str, int, str]]:
    """(path, new line number, text) of every added line.

    Hunk bodies are read by the counts in their header, never by the look of a line,
    because an added line reading "++ b/x" shows up as "+++ b/x" in the diff.
    """
    path = ""
    number = old_left = new_left = 0
    binary = False
    # Git splits on "\n" only; str.splitlines() would also split on \x0c, \x1c, U+2028 and
    # shift every line number after one of them.
    for raw in patch.split("\n"):
        line = raw[:-1] if raw.endswith("\r") else raw
        if old_left > 0 or new_left > 0:
            tag = line[:1]
            if tag == "+" and new_left > 0:
                yield path, number, line[1:]
                number += 1
                new_left -= 1
                continue
            if tag == "-" and old_left > 0:
                old_left -= 1
                continue
            if tag in (" ", "") and old_left > 0 and new_left > 0:
                number += 1
                old_left -= 1
                new_left -= 1
                continue
            if tag == "\\":  # "\ No newline at end of file"
                continue
            old_left = new_left = 0  # a hunk shorter than its header: read on as headers
        if line.startswith(("diff --git ", "diff --cc ", "diff --combined ")):
            path = _path_from_git_header(line)
            binary = line.startswith(("diff --cc ", "diff --combined "))  # combined diffs: not ours
        elif line.startswith("GIT binary patch"):
            binary = True
        elif line.startswith(("rename to ", "copy to ")):
            path = _unquote(line.split(" to ", 1)[1])
        elif line.startswith("+++ "):
            name = _unquote(line[4:].split("\t", 1)[0])
            path = "" if name == "/dev/null" else name.removeprefix("b/")
        elif not binary and (hunk := _HUNK.match(line)):
            old_left = 1 if hunk.group(2) is None else int(hunk.group(2))
            new_left = 1 if hunk.group(4) is None else int(hunk.group(4))
            number = int(hunk.group(3))


def _path_from_git_header(line: str) -> str:
    """The path from "diff --git a/P b/P" when it is unambiguous (a pure mode change has no "+++")."""
    rest = line.split(" ", 2)[2] if line.count(" ") >= 2 else ""
    half = (len(rest) - 1) // 2
    old, sep, new = rest[:half], rest[half : half + 1], rest[half + 1 :]
    if sep == " " and old.startswith("a/") and new.startswith("b/") and old[2:] == new[2:]:
        return new[2:]
    return ""


_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def _unquote(name: str) -> str:
    """Undo git's C-style quoting of unusual paths ("b/caf\\303\\251.txt")."""
    name = name.rstrip("\t")
    if len(name) < 2 or not (name.startswith('"') and name.endswith('"')):
        return name
    out = bytearray()
    body, i = name[1:-1], 0
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            octal = body[i + 1 : i + 4]
            if len(octal) == 3 and all(c in "01234567" for c in octal):
                out.append(int(octal, 8) & 0xFF)
                i += 4
                continue
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                i += 2
                continue
        out += char.encode()
        i += 1
    return out.decode("utf-8", errors="replace")

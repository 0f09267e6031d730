"""What Baton says on GitHub: user-supplied text made inert, and one fixed sentence per error.

Everything a person outside Baton typed (an agent name, a label, a login, a
line of a policy file) reaches a comment or a check run only through
``inert``: a Markdown code span that no backtick inside can close, on one line,
so it can never become a mention, a link, an image or a fake heading.

Errors are described by their stable code, never by their exception text:
exception text can carry URLs, tokens' neighbours or a library's internals
(``data_model=<class …>``), so it goes to the worker log, and the issue gets
the sentence below for its code.
"""

from __future__ import annotations

import re
import unicodedata

#: Longest user-supplied value quoted verbatim; longer ones are cut with an ellipsis.
MAX_QUOTED = 100
_BACKTICKS = re.compile(r"`+")


def inert(text: str, limit: int = MAX_QUOTED) -> str:
    """``text`` as a one-line code span: no mention, link, emphasis or HTML survives in it."""
    cleaned = "".join(
        " " if unicodedata.category(ch) in ("Cc", "Zl", "Zp") else ch
        for ch in text
        if unicodedata.category(ch) != "Cf"  # zero-width and bidi controls: invisible tricks
    ).strip()
    if len(cleaned) > limit:
        cleaned = cleaned[: limit - 1] + "…"
    if not cleaned:
        return "` `"
    longest = max((len(m.group()) for m in _BACKTICKS.finditer(cleaned)), default=0)
    fence = "`" * (longest + 1)
    if longest:  # CommonMark strips one space each side, so a leading/trailing backtick still shows
        return f"{fence} {cleaned} {fence}"
    return f"{fence}{cleaned}{fence}"


def fenced(text: str, info: str = "text") -> str:
    """A fenced code block that nothing inside ``text`` can close."""
    longest = max((len(m.group()) for m in _BACKTICKS.finditer(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


#: code -> what the issue or check run says. Codes not listed get ``UNKNOWN``.
FAILURES: dict[str, str] = {
    "no-app-credentials": "The Baton worker has no GitHub App credentials, so it cannot act on GitHub. "
    "An operator must set APP_ID and PRIVATE_KEY for the worker.",
    "no-installation": "The event did not name a repository and an App installation, so Baton "
    "could not act on it.",
    "no-head-sha": "The event did not name a head commit, so Baton could not check it.",
    "github-call-failed": "GitHub did not answer a call Baton needed, even after retrying.",
    "token-refused": "GitHub refused Baton an access token for this repository. "
    "Check that the App is still installed on it.",
    "bad-name": "The event named a repository or user that is not a valid GitHub name.",
    "org-policy-unreachable": "Baton could not read the organisation's capability policy "
    "(`baton.yml` in its `.github` repository), so it refuses to run anything here.",
    "org-policy-required": "This Baton requires an organisation policy, and the owner's `.github` "
    "repository is not visible to the App. Add the `.github` repository to the App's installation "
    "(or make it public) with a `baton.yml` at its root.",
    "internal-error": "Baton hit an internal error. The operator can find the details in the worker log.",
    "job-failed": "Baton's job for this task failed. The operator can find the details in the worker log.",
    "worker-lost": "The Baton worker running this task stopped before it finished.",
    "timed-out": "The task ran longer than its queue allows and was stopped.",
    "task-undecodable": "A newer or older Baton stored this task in a form this worker cannot read.",
    "reserved-env": "The policy passes one of Baton's own settings to the agent, and an agent never "
    "gets Baton's credentials, so nothing was run. An org admin must remove it from the agent's `env`.",
}
UNKNOWN = "Baton could not finish this task. The operator can find the details in the worker log."


def failure(code: str) -> str:
    """The sentence an issue or check run shows for error ``code`` (never exception text)."""
    return FAILURES.get(code, UNKNOWN)

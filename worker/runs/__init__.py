"""Agent runs on GitHub: from an allowed task to a pull request, with the worker holding every key.

Reading order: ``budget`` (the per-issue lock, daily budgets and concurrency, decided
before anything starts), ``admit`` (the control-queue step that reserves them and hands
the task to the agents queue), ``cancel`` (how a cancel reaches a run on any worker),
``mirror`` (the repository's clone, fetched and pushed with tokens no agent can see),
``execute`` (the agents-queue step: checkout, the runner, the branch and the pull
request; ``identity`` is the App's bot it commits as), ``report`` (what the issue, the
pull request and its check runs say).
"""

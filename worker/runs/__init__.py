"""Agent runs on GitHub: from an allowed task to a pull request, with the worker holding every key.

Reading order: ``budget`` (the per-issue lock, daily budgets and concurrency, decided
before anything starts), ``admit`` (the control-queue step that reserves them and hands
the task to the agents queue), ``cancel`` (how a cancel reaches a run on any worker),
``mirror`` (the repository's clone, fetched and pushed with tokens no agent can see),
``plan`` (what a run job works from), ``supervisor`` (the thread that keeps a run's
claims alive and stops it), ``execute`` (the agents-queue step: checkout, the runner, the
branch; ``identity`` is the App's bot it commits as), ``record`` (what a run did, typed),
``pull_request`` (the pull request and its signed check runs), ``report`` (what the
issue, the pull request and its check runs say).
"""

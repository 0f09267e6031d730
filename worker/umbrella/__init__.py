"""Umbrella issues: an issue's task list split into sub-issues, each run on its own, and each run's
siblings verified before anything it made is published (``split``, ``siblings``, ``table``)."""

"""One error root for Baton: a stable code, a message for the person who can fix it."""

from __future__ import annotations


class BatonError(Exception):
    """Base of every error Baton raises on purpose.

    ``code`` is stable (tests and logs match on it, never on the message) and registered in
    ``baton.codes`` with the sentence the public sees and the fix (``tests/test_error_codes.py``
    fails on an unregistered one); ``message`` says what failed and how to fix it, and goes to
    the log or terminal only.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return self.message


class ConfigError(BatonError):
    """The environment or a file Baton reads is wrong; the message names it."""


class RedisUnavailable(BatonError):
    """Redis refused a write, could not be reached, or did not confirm it in time (``redis-timeout``)."""

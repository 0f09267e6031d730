"""A local stand-in for api.github.com, for Baton's tests and demo.

Top-level on purpose: it plays GitHub, so nothing in ``bot`` or ``worker``
imports it; they reach it over HTTP through ``GITHUB_API_URL`` like the real
thing. Public surface: :func:`create_app` (the Starlette app) and
:class:`EmulatorServer` (a live server on a background thread).
"""

from emulator.app import create_app
from emulator.server import EmulatorServer

__all__ = ["EmulatorServer", "create_app"]

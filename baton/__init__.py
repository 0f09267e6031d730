"""Baton's kernel: what the web side (``bot``) and the worker (``worker``) both stand on.

Errors and their codes, the task model and its states, queue names, every Redis key name, settings
and ``.env``, logging, the embedded Redis, and the ``baton`` command's entry point. Nothing here
imports ``bot``, ``worker`` or the emulator, except :mod:`baton.cli`, which composes the commands.
"""

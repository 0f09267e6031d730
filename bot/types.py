"""ASGI type aliases shared by the web side (as Starlette keeps them in one small module)."""

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["ASGIApp", "Message", "Receive", "Scope", "Send"]

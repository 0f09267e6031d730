"""How the gateway talks to each model provider: its API root, how its key is sent, its wire protocols.

The policy names providers by host (``worker.policy.catalogue.MODEL_PROVIDERS``: the
host an admin writes in ``model_endpoints`` and the env names of its key); this table
says what the wire needs, keyed by the same provider name. Inside the box every
provider lives under its own path on the gateway, ``http://127.0.0.1:3129/<name>``,
so the provider of a request is never a guess from its shape.

Each protocol is a closed list of operations (``operations.py``): inference and
token counting, nothing else. The four OpenAI-compatible providers speak Chat
Completions only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from worker.policy.catalogue import MODEL_PROVIDERS


class Protocol(StrEnum):
    ANTHROPIC = "anthropic-messages"
    OPENAI_RESPONSES = "openai-responses"
    OPENAI_CHAT = "openai-chat"
    GEMINI = "gemini"


class Auth(StrEnum):
    """Where the real key goes on the request to the provider."""

    X_API_KEY = "x-api-key"
    BEARER = "authorization"
    GOOG = "x-goog-api-key"


@dataclass(frozen=True)
class Wire:
    provider: str
    #: The vendor's API root, to which an operation's path (``/v1/messages``) is appended.
    base_url: str
    auth: Auth
    protocols: tuple[Protocol, ...]
    #: Sent when the agent did not send them (Anthropic's API refuses a request without a version).
    default_headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "default_headers", MappingProxyType(dict(self.default_headers)))


_CHAT = (Protocol.OPENAI_CHAT,)

WIRES: Mapping[str, Wire] = MappingProxyType(
    {
        w.provider: w
        for w in (
            Wire(
                "anthropic",
                "https://api.anthropic.com",
                Auth.X_API_KEY,
                (Protocol.ANTHROPIC,),
                {"anthropic-version": "2023-06-01"},
            ),
            Wire(
                "openai",
                "https://api.openai.com",
                Auth.BEARER,
                (Protocol.OPENAI_RESPONSES, Protocol.OPENAI_CHAT),
            ),
            Wire("gemini", "https://generativelanguage.googleapis.com", Auth.GOOG, (Protocol.GEMINI,)),
            Wire("mistral", "https://api.mistral.ai", Auth.BEARER, _CHAT),
            Wire("deepseek", "https://api.deepseek.com", Auth.BEARER, _CHAT),
            Wire("groq", "https://api.groq.com/openai", Auth.BEARER, _CHAT),
            Wire("openrouter", "https://openrouter.ai/api", Auth.BEARER, _CHAT),
        )
    }
)

#: Provider name -> the host a policy names for it.
HOSTS: Mapping[str, str] = MappingProxyType({p.name: host for host, p in MODEL_PROVIDERS.items()})


def served(name: str) -> str:
    """``name`` if the gateway serves that provider; a ValueError naming the ones it does if not."""
    if name not in WIRES:
        raise ValueError(f"{name!r} is not a provider the model gateway serves ({', '.join(sorted(WIRES))})")
    return name


def provider_of(host: str) -> str | None:
    """The provider a policy's model endpoint names, or None if the gateway serves no such host."""
    found = MODEL_PROVIDERS.get(host)
    return found.name if found is not None else None


def key_envs(provider: str) -> tuple[str, ...]:
    """The env names the provider's key is read from on the worker, preferred first."""
    return MODEL_PROVIDERS[HOSTS[provider]].key_envs

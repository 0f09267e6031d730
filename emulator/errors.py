"""GitHub-shaped errors: raised anywhere in a handler, rendered once by the app.

GitHub answers every failure with ``{"message", "documentation_url", "status"}``
(plus ``errors`` for 422 validation failures); clients such as githubkit parse
these into ``BasicError``/``ValidationError``, so the shape matters.
"""

from __future__ import annotations

from typing import Any

DOCS = "https://docs.github.com/rest"


class ApiError(Exception):
    """An answer GitHub would give instead of the resource."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        documentation_url: str = DOCS,
        errors: list[Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.documentation_url = documentation_url
        self.errors = errors
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"message": self.message}
        if self.errors is not None:
            out["errors"] = self.errors
        out["documentation_url"] = self.documentation_url
        out["status"] = str(self.status)
        return out


def not_found(documentation_url: str = DOCS) -> ApiError:
    """GitHub's answer for anything missing *or* invisible to the caller."""
    return ApiError(404, "Not Found", documentation_url=documentation_url)


def bad_credentials() -> ApiError:
    return ApiError(401, "Bad credentials")


def requires_authentication() -> ApiError:
    return ApiError(401, "Requires authentication")


def not_accessible() -> ApiError:
    """A valid installation token used outside its permissions."""
    return ApiError(403, "Resource not accessible by integration")


def validation_failed(errors: list[dict[str, Any]], documentation_url: str = DOCS) -> ApiError:
    """A semantic 422 (``Validation Failed`` with an ``errors`` list)."""
    return ApiError(422, "Validation Failed", errors=errors, documentation_url=documentation_url)


def invalid_request(detail: str, documentation_url: str = DOCS) -> ApiError:
    """A schema-level 422: GitHub words these ``Invalid request.\\n\\n<detail>``."""
    return ApiError(422, f"Invalid request.\n\n{detail}", documentation_url=documentation_url)

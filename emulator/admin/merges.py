"""Admin API, part seven: a person merges a pull request.

The person clicks "Merge pull request" (or squash, or rebase): the same function as the REST
API (:mod:`emulator.merging`), so GitHub's refusals (405, 409) apply and the same webhooks go
out in the same order (``push``, ``pull_request.closed``, ``issues.closed``), with the person as
``sender``, before the admin call answers (unless ``"wait": false``). As GitHub documents, "To
merge pull requests, you must have write permissions in the repository": the person needs
write, maintain or admin (403 otherwise).
"""

from __future__ import annotations

from typing import Any

from emulator import merging, webhooks
from emulator.admin.setup import LOGIN, AdminBase, AdminError, ensure_user, need_str, role_of
from emulator.state import Delivery, Pull, Repo

#: The roles that may merge (GitHub's docs: write permissions).
_MERGERS = ("admin", "maintain", "write")


def _optional_str(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise AdminError(422, f"'{key}' must be a string")
    return value


class MergesAdmin(AdminBase):
    def _pull(self, repo: Repo, number: str) -> Pull:
        found = self.emu.state.pull(repo.full_name, int(number)) if number.isdigit() else None
        if found is None:
            raise AdminError(404, f"no pull request #{number} in {repo.full_name}")
        return found

    async def merge(self, body: dict[str, Any], params: dict[str, str], base: str) -> tuple[int, Any]:
        """``sender`` merges by ``method`` (merge/squash/rebase), with ``commit_title``,
        ``commit_message`` and ``sha`` as the REST API takes them."""
        repo = self._repo(params)
        pull = self._pull(repo, params["number"])
        login = ensure_user(self.emu, need_str(body, "sender", LOGIN)).login
        if role_of(repo, login) not in _MERGERS:
            raise AdminError(
                403,
                f"{login} needs write or more on {repo.full_name} to merge "
                "(GitHub: to merge pull requests, you must have write permissions in the repository)",
            )
        method = body.get("method", "merge")
        if method not in merging.METHODS:
            raise AdminError(422, f"'method' must be one of {', '.join(merging.METHODS)}")
        ask = merging.MergeAsk(
            method=method,
            title=_optional_str(body, "commit_title"),
            message=_optional_str(body, "commit_message"),
            sha=_optional_str(body, "sha"),
        )
        pending: list[Delivery] = []
        sha = merging.merge(self.emu, base, repo, pull, ask, pending=pending, sender=login, acting=None)
        await self._send(pending, body)
        return 200, {
            "sha": sha,
            "merged": True,
            "message": merging.MERGED,
            "deliveries": [webhooks.summary(d) for d in pending],
        }

"""The evidence, served read-only: public keys, each installation's log, its proofs and receipts.

The keys, checkpoints, leaf hashes and proofs are anyone's: they name nothing, and with them anyone can
check offline (`baton verify`, `baton log verify`) that the log only grows. What a receipt says is
served only with its link's key or the operator's token (``evidence.links``): an installation's
repositories may be private. evidence.log is synchronous, so its calls run in the thread pool on a
client of their own; none is on the webhook path.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping

from redis.exceptions import RedisError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from baton import codes, redis_client
from baton.errors import BatonError
from baton.settings import Settings, bearer_matches
from evidence import links, merkle
from evidence.keys import keys_document
from evidence.log import MAX_ENTRIES, Log
from evidence.verify import bundle

KEYS_PATH = links.KEYS_PATH
LOG_PATH = links.log_path("{installation}")
#: Entries a request gets when it gives no end.
DEFAULT_ENTRIES = 100
#: Up to 18 ASCII digits: bigger than any log, small enough to need no bignum checks.
_NUMBER = re.compile(r"[0-9]{1,18}")
#: Keys change only on rotation; the log and its proofs change with every append.
KEYS_CACHE = "public, max-age=300"
NO_STORE = "no-store"

logger = logging.getLogger("baton.evidence")


class BadRequest(BatonError):
    """A parameter a client sent is wrong (400); the message names it."""

    def __init__(self, message: str) -> None:
        super().__init__(codes.BAD_REQUEST, message)


class NotFound(BatonError):
    """There is nothing at this address (404)."""

    def __init__(self, message: str) -> None:
        super().__init__(codes.NOT_FOUND, message)


class Forbidden(BatonError):
    """What is asked for is not served to this request (403); the message says what would be."""

    def __init__(self, message: str) -> None:
        super().__init__(codes.FORBIDDEN, message)


def _number(raw: str | None, name: str, default: int | None = None) -> int:
    if raw is None or raw == "":
        if default is None:
            raise BadRequest(f"{name} is required: a non-negative integer")
        return default
    if not _NUMBER.fullmatch(raw):
        raise BadRequest(f"{name} must be a non-negative integer (at most 18 digits), got {raw[:40]!r}")
    return int(raw)


def _json(body: Mapping[str, object], status: int = 200, cache: str = NO_STORE) -> Response:
    return JSONResponse(dict(body), status_code=status, headers={"Cache-Control": cache})


class EvidenceEndpoints:
    """The /.well-known/baton routes over one installation-agnostic Redis client."""

    def __init__(self, settings: Settings, redis_url: str | None) -> None:
        self.settings = settings
        self.replication = redis_client.Replication(settings.redis_replicas, settings.redis_timeout)
        self.client = redis_client.connect(redis_url, timeout=settings.redis_timeout) if redis_url else None

    def routes(self) -> list[Route]:
        return [
            Route(KEYS_PATH, self.keys, methods=["GET"]),
            Route(f"{LOG_PATH}/checkpoint", self._handler(self._checkpoint), methods=["GET"]),
            Route(f"{LOG_PATH}/entries", self._handler(self._entries), methods=["GET"]),
            Route(f"{LOG_PATH}/proof/inclusion", self._handler(self._inclusion), methods=["GET"]),
            Route(f"{LOG_PATH}/proof/consistency", self._handler(self._consistency), methods=["GET"]),
            Route(LOG_PATH + "/receipts/{index}", self._handler(self._receipt), methods=["GET"]),
        ]

    def close(self) -> None:
        if self.client is not None:
            self.client.close()

    async def keys(self, _: Request) -> Response:
        published = self.settings.public_keys
        if not published:
            return _json(
                {"error": "this Baton has no signing key configured, so it publishes no keys (setup mode)"},
                404,
            )
        return _json(keys_document(published), cache=KEYS_CACHE)

    def _handler(
        self, read: Callable[[Log, Request], Mapping[str, object]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """Parse the installation, run ``read`` in the thread pool, and turn failures into JSON."""

        async def endpoint(request: Request) -> Response:
            try:
                installation = _number(request.path_params["installation"], "installation")
                if self.client is None:
                    return _json({"error": "the transparency log is unavailable: no Redis configured"}, 503)
                body = await run_in_threadpool(read, Log(self.client, installation), request)
            except BadRequest as exc:
                return _json({"error": str(exc)}, 400)
            except NotFound as exc:
                return _json({"error": str(exc)}, 404)
            except Forbidden as exc:
                return _json({"error": str(exc)}, 403)
            except redis_client.NotReplicated as exc:
                logger.warning(
                    "evidence: the log's head is not on the replicas yet", extra={"error": exc.message}
                )
                return _json({"error": "the transparency log is unavailable: try again shortly"}, 503)
            except (RedisError, OSError) as exc:
                # Redis's own words name hosts and ports: they go to the log, not to whoever asks.
                logger.warning(
                    "evidence: Redis did not answer", extra={"error": str(exc) or type(exc).__name__}
                )
                return _json({"error": "the transparency log is unavailable: try again shortly"}, 503)
            return _json(body)

        return endpoint

    # Each reader runs in a worker thread; it reads the checkpoint first, so every answer is for a
    # tree a client can hold the log to (nodes are append-only: proofs for older sizes stay valid).

    def _head(self, log: Log) -> tuple[dict[str, object], int]:
        """The latest signed checkpoint and its tree size; 404 when the installation has no log."""
        doc = log.checkpoint()
        if doc is None:
            raise NotFound(f"no log for installation {log.installation}")
        # Never hand out a tree head a failover could take back: a new primary would sign another
        # tree of that size, and whoever held this one would see a fork (BATON_REDIS_REPLICAS).
        self.replication.confirm(log.client, f"the checkpoint of installation {log.installation}")
        size = doc.get("treeSize")
        if not isinstance(size, int):
            raise RuntimeError(f"the checkpoint of installation {log.installation} has no treeSize")
        return doc, size

    def _checkpoint(self, log: Log, _: Request) -> Mapping[str, object]:
        return self._head(log)[0]

    def _entries(self, log: Log, request: Request) -> Mapping[str, object]:
        size = self._head(log)[1]
        params = request.query_params
        start = _number(params.get("start"), "start", 0)
        if start > size:
            raise BadRequest(f"start {start} is past the end of the log (size {size})")
        end = _number(params.get("end"), "end", min(size, start + min(DEFAULT_ENTRIES, MAX_ENTRIES)))
        if end < start:
            raise BadRequest(f"end {end} is before start {start} (end is exclusive)")
        if end > size:
            raise BadRequest(f"end {end} is past the end of the log (size {size})")
        if end - start > MAX_ENTRIES:
            raise BadRequest(f"end - start is {end - start}: at most {MAX_ENTRIES} entries per request")
        operator = self._operator(request)
        entries: list[dict[str, object]] = []
        for i, raw in enumerate(log.entries(start, end), start):
            entry: dict[str, object] = {"index": i, "leafHash": merkle.leaf_hash(raw).hex()}
            if operator:  # what each receipt says only for the operator: it may be a private repository's
                entry["entry"] = json.loads(raw)
            entries.append(entry)
        return {"start": start, "end": end, "entries": entries}

    def _operator(self, request: Request) -> bool:
        token = self.settings.metrics_token
        return token is not None and bearer_matches(request.headers.get("authorization"), token)

    def _inclusion(self, log: Log, request: Request) -> Mapping[str, object]:
        current = self._head(log)[1]
        params = request.query_params
        index = _number(params.get("index"), "index")
        size = _number(params.get("size"), "size", current)
        if size > current:
            raise BadRequest(f"size {size} is larger than the log (size {current})")
        if index >= size:
            raise BadRequest(f"index {index} is not in a tree of size {size} (index must be < size)")
        return {"index": index, "size": size, "proof": [h.hex() for h in log.inclusion(index, size)]}

    def _consistency(self, log: Log, request: Request) -> Mapping[str, object]:
        current = self._head(log)[1]
        params = request.query_params
        old = _number(params.get("from"), "from")
        new = _number(params.get("to"), "to", current)
        if new > current:
            raise BadRequest(f"to {new} is larger than the log (size {current})")
        if old > new:
            raise BadRequest(f"from {old} is larger than to {new}")
        # From the empty tree or to the same tree there is nothing to prove (RFC 9162 §2.1.4).
        proof = [] if old in (0, new) else log.consistency(old, new)
        return {"from": old, "to": new, "proof": [h.hex() for h in proof]}

    def _receipt(self, log: Log, request: Request) -> Mapping[str, object]:
        head, size = self._head(log)
        index = _number(request.path_params["index"], "index")
        if index >= size:
            raise BadRequest(f"index {index} is not in the log (size {size}): receipts are 0 to {size - 1}")
        given = request.query_params.get(links.KEY_PARAM)
        if not self._operator(request) and not links.key_matches(
            self.settings.audit_secret, log.installation, index, given
        ):
            raise Forbidden(
                f"receipt {index} is served to the link its check run gives (it carries the key "
                f"?{links.KEY_PARAM}=…) or with Authorization: Bearer BATON_METRICS_TOKEN"
            )
        [raw] = log.entries(index, index + 1)
        entry = {
            "installation": log.installation,
            "logIndex": index,
            "leafHash": merkle.leaf_hash(raw).hex(),
            "inclusionProof": [h.hex() for h in log.inclusion(index, size)],
            "checkpoint": head,
        }
        return bundle(json.loads(raw), entry)

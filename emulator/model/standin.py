"""A local stand-in for model providers, scripted turn by turn: for tests and the demo, never for Baton.

It speaks the Anthropic Messages API as Claude Code uses it (``POST /v1/messages``, with any query
string, and ``/v1/messages/count_tokens``), the OpenAI Responses API as Codex uses it
(``POST /v1/responses``), OpenAI Chat Completions as Qwen Code, OpenCode, Aider and mini-swe-agent use
it (``POST /v1/chat/completions``) and the Gemini API as Gemini CLI uses it
(``/v1beta/models/{model}:streamGenerateContent`` and friends), answers ``HEAD``/``GET``
and any other path 404 at once, and records every request (auth header *values* replaced by their
SHA-256) in memory and in a JSONL file. The script format is in :mod:`emulator.model.script`.

Built on the standard library's threading HTTP server, not uvicorn: a stand-in must be able to
hold a request without answering and to drop a connection before any byte of a response, which an
ASGI application cannot express. Everything is bounded: body size, stall time, connections, the
in-memory record, the socket read timeout.
"""

from __future__ import annotations

import copy
import json
import threading
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import Any

from emulator.model.script import Script, load_script, parse_script
from emulator.model.server import StandinServer
from emulator.model.wire import key_fingerprint
from emulator.types import JSONObject

__all__ = ["HOST", "MAX_STALL_SECONDS", "RECORD_NAME", "ModelStandin", "key_fingerprint"]

HOST = "127.0.0.1"
RECORD_NAME = "model-requests.jsonl"
MAX_BODY_BYTES = 32 * 1024 * 1024  # Anthropic's own limit for a Messages request
MAX_STALL_SECONDS = 30.0
MAX_RECORDS = 1000
POLL_SECONDS = 0.05  # how soon stop() is noticed


def _as_script(script: Script | Path | str | list[Any] | dict[str, Any]) -> Script:
    if isinstance(script, Script):
        return script
    if isinstance(script, Path | str):
        return load_script(Path(script))
    return parse_script(script)


class ModelStandin:
    """A live stand-in on 127.0.0.1 (``port=0``: a free one), on a background thread.

    ``url`` is the Anthropic base URL (``ANTHROPIC_BASE_URL``; Claude Code appends ``/v1/messages``)
    and the Gemini one (``GOOGLE_GEMINI_BASE_URL``), ``openai_base_url`` (``…/v1``) the Codex provider
    ``base_url`` and the Chat Completions base URL (``OPENAI_BASE_URL``, ``OPENAI_API_BASE``, OpenCode's
    ``baseURL``). With ``api_key`` set, a request without that key (``x-api-key`` for Anthropic,
    ``Authorization: Bearer`` for OpenAI, ``x-goog-api-key`` or ``?key=`` for Gemini) gets 401.
    ``workspace`` turns relative paths into absolute ones for file tools (else the script's
    ``workspace``, else the working directory the CLI states in its prompt).
    """

    def __init__(
        self,
        script: Script | Path | str | list[Any] | dict[str, Any],
        *,
        port: int = 0,
        record_dir: Path | None = None,
        record_file: Path | None = None,
        api_key: str | None = None,
        workspace: str | Path | None = None,
        max_stall_seconds: float = MAX_STALL_SECONDS,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        if record_dir is not None and record_file is not None:
            raise ValueError("give record_dir or record_file, not both")
        if api_key is not None and not api_key:
            raise ValueError("api_key must not be empty")
        if workspace is not None and not str(workspace).startswith("/"):
            raise ValueError("workspace must be an absolute path")
        self.script = _as_script(script)
        self.record_path = record_dir / RECORD_NAME if record_dir is not None else record_file
        self.api_key = api_key
        self.workspace = str(workspace) if workspace is not None else None
        self.max_stall_seconds = max(0.0, max_stall_seconds)
        self.max_body_bytes = max_body_bytes
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._hits: dict[int, int] = {}
        self._records: deque[JSONObject] = deque(maxlen=MAX_RECORDS)
        self._seq = 0
        self._httpd = StandinServer((HOST, port), self)
        self.port: int = self._httpd.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    def requests(self) -> list[JSONObject]:
        """The recorded requests, oldest first (the last ``MAX_RECORDS``; the file has them all)."""
        with self._lock:
            return copy.deepcopy(list(self._records))

    def reset(self) -> None:
        """Forget the turns served and the requests recorded in memory: the script starts over."""
        with self._lock:
            self._hits.clear()
            self._records.clear()

    def start(self) -> ModelStandin:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(POLL_SECONDS,), name="model-standin", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread until interrupted (the CLI)."""
        try:
            self._httpd.serve_forever(POLL_SECONDS)
        finally:
            self.stopping.set()
            self._httpd.server_close()

    def stop(self) -> None:
        self.stopping.set()  # wakes every stalled request
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> ModelStandin:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def next_hit(self, turn: int) -> int:
        """How many requests already arrived at this turn (and count this one)."""
        with self._lock:
            hit = self._hits.get(turn, 0)
            self._hits[turn] = hit + 1
            return hit

    def record(self, entry: JSONObject) -> None:
        with self._lock:
            entry["seq"] = self._seq
            self._seq += 1
            self._records.append(entry)
            if self.record_path is not None:
                self.record_path.parent.mkdir(parents=True, exist_ok=True)
                with self.record_path.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(entry, separators=(",", ":")) + "\n")

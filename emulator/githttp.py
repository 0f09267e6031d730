"""GitHub's non-API surface: git over smart HTTP (``{base}/{owner}/{repo}.git``, served by
``git http-backend``) and raw file downloads (``download_url``, under ``/_raw``).

Authentication follows GitHub: HTTP Basic with any user name and an
installation token as the password (``x-access-token:ghs_…``), or an
``Authorization: token|Bearer`` header. Anyone may fetch a public repository;
fetching a private one needs ``contents: read``, pushing needs ``contents:
write`` within the token's repositories. A push that moves a branch sends
``push`` and, for open pull requests on that branch, ``pull_request.synchronize``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from emulator.auth import Caller, authenticate, authorize_repo
from emulator.core import Emulator
from emulator.errors import ApiError
from emulator.gitrepo import GitError
from emulator.pushes import push_events
from emulator.state import Repo

BACKEND_TIMEOUT_SECONDS = 120.0
_SERVICES = {"git-upload-pack": "read", "git-receive-pack": "write"}


def _authorization(request: Request) -> str | None:
    """Basic ``user:token`` becomes ``token <token>``; other schemes pass through."""
    header = request.headers.get("authorization")
    if not header or not header.lower().startswith("basic "):
        return header
    try:
        decoded = base64.b64decode(header[6:].strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return "token invalid"
    _, _, password = decoded.partition(":")
    return f"token {password}" if password else None


def _denied(status: int, message: str) -> Response:
    headers = {"WWW-Authenticate": 'Basic realm="GitHub"'} if status == 401 else {}
    return PlainTextResponse(message + "\n", status_code=status, headers=headers)


def _service(request: Request) -> str | None:
    rest = str(request.path_params["rest"])
    if rest == "info/refs" and request.method == "GET":
        return request.query_params.get("service")
    if request.method == "POST" and rest in _SERVICES:
        return rest
    return None


def _parse_cgi(output: bytes) -> Response:
    head, _, body = output.partition(b"\r\n\r\n")
    if not body and b"\n\n" in output:
        head, _, body = output.partition(b"\n\n")
    status = 200
    headers: dict[str, str] = {}
    for line in head.decode("latin-1").splitlines():
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.strip().split()[0])
        elif name:
            headers[name.strip()] = value.strip()
    return Response(content=body, status_code=status, headers=headers)


async def _run_backend(emu: Emulator, request: Request, repo: Repo, caller: Caller) -> Response:
    body = await request.body()
    env = {
        "GIT_PROJECT_ROOT": str((emu.directory / "repos").resolve()),
        "GIT_HTTP_EXPORT_ALL": "1",
        "PATH_INFO": f"/{repo.owner}/{repo.name}.git/{request.path_params['rest']}",
        "REQUEST_METHOD": request.method,
        "QUERY_STRING": request.url.query,
        "CONTENT_TYPE": request.headers.get("content-type", ""),
        "CONTENT_LENGTH": str(len(body)),
        "REMOTE_ADDR": "127.0.0.1",
        # http-backend only accepts pushes from an authenticated user.
        "REMOTE_USER": caller.app.slug if caller.app is not None else "anonymous",
        "GIT_CONFIG_NOSYSTEM": "1",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
    }
    if encoding := request.headers.get("content-encoding"):
        env["HTTP_CONTENT_ENCODING"] = encoding
    if protocol := request.headers.get("git-protocol"):
        env["GIT_PROTOCOL"] = protocol
    proc = await asyncio.create_subprocess_exec(
        "git",
        "http-backend",
        stdin=asyncio.subprocess.PIPE if body else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        out = await asyncio.wait_for(_exchange(proc, body), timeout=BACKEND_TIMEOUT_SECONDS)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return _denied(504, "git http-backend timed out")
    return _parse_cgi(out)


async def _exchange(proc: asyncio.subprocess.Process, body: bytes) -> bytes:
    """Feed the request body and read the answer at once (a large pack fills both pipes).

    The backend may answer and exit before reading all of its input (a GET, a refusal); writing
    then fails (uvloop says RuntimeError, asyncio BrokenPipeError), and its output is the answer."""

    async def feed() -> None:
        if proc.stdin is None:
            return
        try:
            proc.stdin.write(body)
            await proc.stdin.drain()
            proc.stdin.close()
        except (RuntimeError, BrokenPipeError, ConnectionResetError):
            pass

    if proc.stdout is None or proc.stderr is None:
        raise RuntimeError("git http-backend was started without stdout/stderr pipes: pass PIPE for both")
    _, out, _ = await asyncio.gather(feed(), proc.stdout.read(), proc.stderr.read())
    await proc.wait()
    return out


def routes(emu: Emulator) -> list[BaseRoute]:
    async def endpoint(request: Request) -> Response:
        repo = emu.state.repo(request.path_params["owner"], request.path_params["name"])
        service = _service(request)
        if repo is None or service not in _SERVICES:
            return _denied(404, "Repository not found.")
        try:
            caller = authenticate(emu.state, _authorization(request))
            authorize_repo(caller, repo, "contents", _SERVICES[service])
        except ApiError as exc:
            # git retries with credentials only after a 401 carrying WWW-Authenticate.
            if not request.headers.get("authorization"):
                return _denied(401, "Authentication required.")
            if exc.status == 401:
                return _denied(401, "Invalid username or token. Password authentication is not supported.")
            if exc.status == 404:
                return _denied(404, "Repository not found.")
            return _denied(403, f"Permission to {repo.full_name}.git denied.")
        before = emu.git(repo).branches() if service == "git-receive-pack" else {}
        response = await _run_backend(emu, request, repo, caller)
        if service == "git-receive-pack" and request.method == "POST":
            base = str(request.base_url).rstrip("/")
            pending = push_events(
                emu, base, repo, before=before, after=emu.git(repo).branches(), sender=None, acting=caller.app
            )
            if pending:
                emu.changed()
                await emu.schedule(pending)
        return response

    async def raw(request: Request) -> Response:
        """``download_url`` targets (GitHub's raw.githubusercontent.com): file bytes at ``?ref=``."""
        repo = emu.state.repo(request.path_params["owner"], request.path_params["name"])
        if repo is None:
            return _denied(404, "404: Not Found")
        try:
            authorize_repo(authenticate(emu.state, _authorization(request)), repo, "contents", "read")
        except ApiError:
            return _denied(404, "404: Not Found")
        git = emu.git(repo)
        commit = git.resolve(request.query_params.get("ref") or repo.default_branch)
        try:
            entry = git.entry(commit, str(request.path_params["path"])) if commit else None
        except GitError:
            entry = None
        if entry is None or entry.type != "blob":
            return _denied(404, "404: Not Found")
        return Response(git.blob(entry.sha), media_type="text/plain; charset=utf-8")

    return [
        Route("/{owner}/{name}.git/{rest:path}", endpoint, methods=["GET", "POST"]),
        Route("/_raw/{owner}/{name}/{path:path}", raw, methods=["GET"]),
    ]

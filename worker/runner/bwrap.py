"""The box as bubblewrap's argv: plain data in, the argument list out (no process, no file read).

``worker.runner.box`` gathers what the argv depends on (the host's root links and /etc entries,
the memfds bwrap reads the box's own /etc files from) into a :class:`Mounts`, and runs what
``options`` and ``command`` return. Keeping the two apart is what lets the argv be tested
without running bwrap, and read without reading the process code around it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from worker.runner.probe import BOX_UID

WORKSPACE = "/workspace"
AGENT_HOME = "/home/agent"
PROXY_SOCKET = "/run/baton/proxy.sock"
PROXY_PORT = 3128
PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"
GATEWAY_SOCKET = "/run/baton/model.sock"
#: Where the box reaches the model gateway: a second forwarder, to ``GATEWAY_SOCKET``.
GATEWAY_PORT = 3129
#: The box's init (``worker/runner/box_init.py``) and the seccomp program it applies, in the box.
INIT_PATH = "/run/baton/init.py"
SECCOMP_PATH = "/run/baton/seccomp.bpf"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
MiB = 1024 * 1024
TMP_BYTES = 1024 * MiB
SHM_BYTES = 64 * MiB
TMP, SHM = "/tmp", "/dev/shm"  # noqa: S108 - the box's own tmpfs mounts, not host temp files
Network = Literal["none", "proxy", "host"]
#: What the agent may write, as the box report names it.
WRITABLE = (
    WORKSPACE,
    AGENT_HOME,
    f"{TMP} (tmpfs, {TMP_BYTES // MiB} MiB)",
    f"{SHM} (tmpfs, {SHM_BYTES // MiB} MiB)",
)


def writable(workspace: bool = True) -> tuple[str, ...]:
    """What the agent may write; without ``workspace`` (a reviewer's box) the workspace is read-only."""
    return WRITABLE if workspace else tuple(w for w in WRITABLE if w != WORKSPACE)


#: Set by the box; a spec's env may not name them (PATH and LANG it may override).
RESERVED_ENV = frozenset({"HOME", "TMPDIR", "PWD", "HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy",
                          "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"})  # fmt: skip
#: The box's loopback holds nothing but Baton's two forwarders: a CLI that honours NO_PROXY reaches
#: the model gateway straight; one that does not goes through the proxy, which hands it over.
_NO_PROXY = "127.0.0.1,localhost"
_PROXY_ENV = {"HTTPS_PROXY": PROXY_URL, "HTTP_PROXY": PROXY_URL, "https_proxy": PROXY_URL,
              "http_proxy": PROXY_URL, "NO_PROXY": _NO_PROXY, "no_proxy": _NO_PROXY}  # fmt: skip
#: Host /etc entries bound read-only when present; nothing else of the host's /etc is in the box.
ETC_ALLOWED = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone",
               "ssl/certs", "ssl/openssl.cnf", "pki/tls/certs", "pki/ca-trust/extracted", "protocols",
               "services", "mime.types", "os-release", "gai.conf", "host.conf")  # fmt: skip
#: The box's own /etc files (written, not the host's).
ETC_WRITTEN = {
    "passwd": b"root:x:0:0:root:/root:/usr/sbin/nologin\nagent:x:1000:1000:Baton agent:/home/agent:/bin/sh\n"
    b"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": b"root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n",
    "hosts": b"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tbaton\n",
    "nsswitch.conf": b"passwd: files\ngroup: files\nhosts: files dns\nprotocols: files\nservices: files\n",
}
#: No ro_bind may land on (or under) what the box mounts itself.
BOX_PATHS = ("/proc", "/dev", "/sys", WORKSPACE, AGENT_HOME, "/run/baton", "/etc/passwd", "/etc/group")


def etc_entries(network: Network) -> tuple[str, ...]:
    """The host /etc entries the box may see: the allow-list, and resolv.conf with the host's network."""
    return (*ETC_ALLOWED, *(["resolv.conf"] * (network == "host")))


@dataclass(frozen=True)
class Mounts:
    """Everything the box's mounts depend on, as plain data (paths already resolved)."""

    network: Network
    workspace: str
    home: str
    proxy_socket: str | None = None
    gateway_socket: str | None = None
    ro_binds: tuple[str, ...] = ()
    #: The workspace bound read-only (a reviewer judges the result; it changes nothing).
    workspace_readonly: bool = False
    #: The host's root links (``/bin`` -> ``usr/bin``); an empty target means a directory to bind.
    root_links: tuple[tuple[str, str], ...] = ()
    #: Host /etc entries that are directories: bound read-only.
    etc_dirs: tuple[str, ...] = ()
    #: /etc files in the box, each with the fd bwrap reads its content from (``--file``).
    etc_files: tuple[tuple[str, int], ...] = ()
    #: Baton's own files in the box (the init, the seccomp program): path, fd.
    box_files: tuple[tuple[str, int], ...] = ()


def options(m: Mounts) -> list[str]:
    """bwrap's options: namespaces and identity, then the root, /etc, /proc, /dev, tmpfs and binds."""
    opts = [
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        *(["--share-net"] * (m.network == "host")),
        # No bwrap reaper in the box: the init below is pid 1. An unfiltered, dumpable bwrap
        # there would let the agent write into its memory through /proc/1/mem and act unfiltered.
        "--as-pid-1",
    ]
    opts += ["--uid", str(BOX_UID), "--gid", str(BOX_UID), "--hostname", "baton"]
    opts += ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr"]
    for name, target in m.root_links:
        opts += ["--symlink", target, f"/{name}"] if target else ["--ro-bind", f"/{name}", f"/{name}"]
    # Directories are bound; files are copied (a mount costs bwrap ~0.4 ms, a copy ~nothing), as are the
    # written ones. Copies live on the root tmpfs, made read-only at the end.
    for entry in m.etc_dirs:
        opts += ["--ro-bind", f"/etc/{entry}", f"/etc/{entry}"]
    for name, fd in m.etc_files:
        opts += ["--perms", "0444", "--file", str(fd), f"/etc/{name}"]
    opts += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(SHM_BYTES),
        "--tmpfs",
        SHM,
        "--remount-ro",
        "/dev",
    ]
    opts += ["--size", str(TMP_BYTES), "--tmpfs", TMP]
    opts += [
        "--ro-bind" if m.workspace_readonly else "--bind",
        m.workspace,
        WORKSPACE,
        "--bind",
        m.home,
        AGENT_HOME,
    ]
    if m.proxy_socket is not None:
        opts += ["--ro-bind", m.proxy_socket, PROXY_SOCKET]
    if m.gateway_socket is not None:
        opts += ["--ro-bind", m.gateway_socket, GATEWAY_SOCKET]
    for path in m.ro_binds:
        opts += ["--ro-bind", path, path]
    for path, fd in m.box_files:
        opts += ["--perms", "0444", "--file", str(fd), path]
    return [*opts, "--chdir", WORKSPACE, "--remount-ro", "/"]


def command(
    argv: Sequence[str],
    *,
    python: str,
    network: Network,
    gateway: bool,
    max_file_bytes: int | None,
    max_processes: int | None,
    seccomp: bool,
) -> list[str]:
    """What the box runs: ``worker/runner/box_init.py`` (at ``INIT_PATH``) on the box's Python,
    which holds the gate and the forwarders, then starts the agent under its rlimits and filter
    (the program at ``SECCOMP_PATH``)."""
    args = []
    if network == "proxy":
        doors = [(PROXY_PORT, PROXY_SOCKET)] + [(GATEWAY_PORT, GATEWAY_SOCKET)] * gateway
        args += [f"forward={port}:{sock}" for port, sock in doors]
    args += ["rlimit=core:0"]
    args += [f"rlimit=fsize:{max_file_bytes}"] * bool(max_file_bytes)
    args += [f"rlimit=nproc:{max_processes}"] * bool(max_processes)
    args += [f"seccomp={SECCOMP_PATH}"] * seccomp
    return [python, "-I", "-S", INIT_PATH, *args, "--", *argv]


def environment(env: Mapping[str, str], network: Network) -> dict[str, str]:
    """bwrap's environment, which the agent inherits: the spec's, then what the box sets."""
    base = {"PATH": SYSTEM_PATH, "LANG": "C.UTF-8", **env, "HOME": AGENT_HOME, "TMPDIR": TMP}
    return {**base, **_PROXY_ENV} if network == "proxy" else base

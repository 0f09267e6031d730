"""The secrets gate's scanner: every kind found where it was added, nothing else, never repeated.

Every fake token here is built at run time by concatenation ("ghp_" + body(36)), never written
out whole: this file is scanned like any other (Baton's own gate, GitHub's push protection), and
a literal token in it would be a finding on every PR that touches it. `test_this_repository_stays_quiet`
holds us to that.
"""

from __future__ import annotations

import os
import shutil
import string
import subprocess
import time
from pathlib import Path

import pytest

from worker.gates import secrets
from worker.gates.secrets import (
    KINDS,
    MAX_FINDINGS,
    MAX_LINE_CHARS,
    Finding,
    redact,
    scan_added_lines,
    scan_patch,
)

ALNUM = string.digits + string.ascii_uppercase + string.ascii_lowercase
UPPER = string.digits + string.ascii_uppercase
URLSAFE = ALNUM + "_-"


def body(n: int, alphabet: str = ALNUM, step: int = 7) -> str:
    """Varied, deterministic characters, so "the last 8 characters" is a meaningful probe."""
    return "".join(alphabet[(i * step + 3) % len(alphabet)] for i in range(n))


PEM_BODY = body(64, ALNUM + "+/", step=5)
# kind -> (a line as it would be added, the secret in it)
FAKES: dict[str, tuple[str, str]] = {
    "github-token": (f'GITHUB_TOKEN = "{"ghp_" + body(36)}"', "ghp_" + body(36)),
    "github-fine-grained-token": (
        "token: " + "github_pat_" + body(22) + "_" + body(59, step=11),
        "github_pat_" + body(22) + "_" + body(59, step=11),
    ),
    "aws-access-key-id": ("AWS_ACCESS_KEY_ID=" + "AKIA" + body(16, UPPER), "AKIA" + body(16, UPPER)),
    # A service-account JSON: the whole PEM on one line, newlines escaped. The secret is the body.
    "private-key-block": (
        '  "private_key": "-----BEGIN '
        + "PRIVATE KEY-----\\n"
        + PEM_BODY
        + "\\n-----END PRIVATE KEY-----\\n",
        PEM_BODY,
    ),
    "slack-token": (
        "SLACK=" + "xoxb-" + "1234567890-9876543210-" + body(24),
        "xoxb-" + "1234567890-9876543210-" + body(24),
    ),
    "google-api-key": ("key=" + "AIza" + body(35, URLSAFE) + "&q=x", "AIza" + body(35, URLSAFE)),
    "stripe-secret-key": (
        "stripe.api_key = '" + "sk_" + "live_" + body(30) + "'",
        "sk_" + "live_" + body(30),
    ),
    "openai-api-key": (
        "OPENAI_API_KEY=" + "sk-" + "proj-" + body(120, URLSAFE),
        "sk-" + "proj-" + body(120, URLSAFE),
    ),
    "anthropic-api-key": (
        "export ANTHROPIC_API_KEY=" + "sk-" + "ant-api03-" + body(93, URLSAFE, step=5),
        "sk-" + "ant-api03-" + body(93, URLSAFE, step=5),
    ),
    "npm-token": ("//registry.npmjs.org/:_authToken=" + "npm_" + body(36), "npm_" + body(36)),
}


def kinds(patch_or_lines: secrets.ScanResult) -> list[tuple[str, int, str]]:
    return [(f.path, f.line, f.kind) for f in patch_or_lines.findings]


def test_every_kind_has_a_fake() -> None:
    assert sorted(FAKES) == sorted(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_is_found_on_the_added_line(kind: str) -> None:
    line, _ = FAKES[kind]
    result = scan_added_lines("src/app/config.py", [(1, "import os"), (41, line), (42, "")])
    assert kinds(result) == [("src/app/config.py", 41, kind)]
    assert result.truncated is False


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_is_found_only_on_added_lines_of_a_patch(kind: str) -> None:
    line, _ = FAKES[kind]
    patch = "\n".join(
        [
            "diff --git a/lib/x.py b/lib/x.py",
            "index 1111111..2222222 100644",
            "--- a/lib/x.py",
            "+++ b/lib/x.py",
            "@@ -10,4 +10,5 @@ def f():",
            " " + line,  # context line 10
            "-" + line,  # removed
            "+pass",  # line 11
            "+" + line,  # line 12
            " ctx",  # line 13
            "@@ -30,2 +31,2 @@",
            "-" + line,
            "-" + line,
            "+" + line,  # line 31
            "+ok",
        ]
    )
    assert kinds(scan_patch(patch)) == [("lib/x.py", 12, kind), ("lib/x.py", 31, kind)]


@pytest.mark.parametrize("kind", KINDS)
def test_removed_and_context_lines_are_never_findings(kind: str) -> None:
    line, _ = FAKES[kind]
    patch = f"--- a/x\n+++ b/x\n@@ -1,3 +1,2 @@\n {line}\n-{line}\n {line}\n"
    assert scan_patch(patch).findings == ()


@pytest.mark.parametrize("kind", KINDS)
def test_findings_never_repeat_the_secret(kind: str) -> None:
    line, secret = FAKES[kind]
    (finding,) = scan_added_lines("a.env", [(3, line)]).findings
    published = (
        repr(finding.to_data()) + finding.description + repr(scan_patch(f"+++ b/a\n@@ -0,0 +1 @@\n+{line}"))
    )
    for probe in (secret, secret[-8:], secret[-16:-8]):
        assert probe not in published
    assert finding.to_data() == {"path": "a.env", "line": 3, "kind": kind, "description": finding.description}


def test_descriptions_show_only_the_fixed_prefix() -> None:
    found = {f.kind: f.description for f in scan_added_lines("x", [(1, FAKES[k][0]) for k in KINDS]).findings}
    assert found["github-token"] == "a GitHub token (ghp_…)"
    assert found["aws-access-key-id"] == "an AWS access key ID (AKIA…)"
    assert found["openai-api-key"] == "an OpenAI API key (sk-proj-…)"
    assert found["private-key-block"] == "a private key block (-----BEGIN … PRIVATE KEY-----)"


@pytest.mark.parametrize(
    "line",
    [
        "gho_" + body(36),
        "ghu_" + body(36),
        "ghs_" + body(36),
        "ghr_" + body(76),  # refresh tokens are longer than 36
        "ASIA" + body(16, UPPER),
        "-----BEGIN " + "RSA PRIVATE KEY-----",
        "-----BEGIN " + "OPENSSH PRIVATE KEY-----  ",
        "-----BEGIN " + "EC PRIVATE KEY-----",
        "-----BEGIN " + "DSA PRIVATE KEY-----",
        "-----BEGIN " + "ENCRYPTED PRIVATE KEY-----",
        "-----BEGIN " + "PGP PRIVATE KEY BLOCK-----",
        'KEY = """' + "-----BEGIN " + "PRIVATE KEY-----",  # an embedded PEM: the body follows
        '"key": "' + "-----BEGIN " + "PRIVATE KEY-----\\r\\n" + PEM_BODY,
        '"k": "' + "-----BEGIN " + "RSA PRIVATE KEY-----\\nProc-Type: 4,ENCRYPTED\\nDEK-Info: x",
        '"k": "' + "-----BEGIN " + "PGP PRIVATE KEY BLOCK-----\\n\\n" + PEM_BODY,
        "xoxp-" + "1234-5678-9012-" + body(32, "0123456789abcdef"),
        "rk_" + "live_" + body(24),
        "sk-" + body(48),  # the legacy OpenAI shape
        "sk-" + "svcacct-" + body(60, URLSAFE),
        "sk-" + "ant-admin01-" + body(40, URLSAFE),
        "Authorization: Bearer " + "ghp_" + body(36),
        "https://x-access-token:" + "ghs_" + body(36) + "@github.com/o/r.git",
        '{"token":"' + "npm_" + body(36) + '"}',
        "(" + "ghp_" + body(36) + ")",
    ],
)
def test_variants_are_found(line: str) -> None:
    assert len(scan_added_lines("f", [(1, line)]).findings) == 1


@pytest.mark.parametrize(
    "line",
    [
        "ghp_short",
        "ghp_" + body(35),
        "xghp_" + body(36),  # glued to a longer identifier: not a token (a deliberate choice)
        "my_ghp_" + body(36),
        "ghp_" + body(36) + "_suffix",
        "github_pat_" + body(81),
        "AKIA" + body(15, UPPER),
        "AKIA" + body(17, UPPER),
        "akia" + body(16, UPPER).lower(),
        "AKIA" + "IOSFODNN7" + "EXAMPLE",  # AWS's own documentation example
        "pip install scikit-learn  # sk-learn",
        "sk-" + "this-is-a-rather-long-kebab-case-class-name-indeed",
        "sk-" + "ant-design-system-button-component-primary-large",
        "sk-" + body(47),
        "sk_" + "test_" + body(24),  # Stripe test keys move no money
        "sk_" + "live_" + body(23),
        "xoxb-" + "not-a-real-token-at-all",
        "xoxb-" + "123-short",
        "AIza" + body(34, URLSAFE),
        "npm_" + body(35),
        "npm_" + body(37),
        "id = '3f2504e0-4f89-11d3-9a0c-0305e82c3301'",  # a UUID
        "sha256:" + "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "0" * 40 + " refs/heads/main",
        "-----BEGIN " + "PUBLIC KEY-----",
        "-----BEGIN " + "CERTIFICATE-----",
        "-----BEGIN " + "RSA PUBLIC KEY-----",
        'PEM_HEADER = "' + "-----BEGIN " + 'RSA PRIVATE KEY-----"',  # a parser's constant, no key follows
        "if line.startswith(b'" + "-----BEGIN " + "PRIVATE KEY-----'):",
        'not_a_key = "' + "-----BEGIN " + 'PRIVATE KEY-----\\nnot a key\\n-----END PRIVATE KEY-----\\n"',
        "",
    ],
)
def test_near_misses_are_not_findings(line: str) -> None:
    assert scan_added_lines("f", [(1, line)]).findings == ()
    assert redact(line) == line


def test_one_finding_per_line_and_kind_in_column_order() -> None:
    gh, aws = "ghp_" + body(36), "AKIA" + body(16, UPPER)
    result = scan_added_lines("f", [(7, f"{aws} {gh} {'gho_' + body(36, step=11)} {aws}")])
    assert kinds(result) == [("f", 7, "aws-access-key-id"), ("f", 7, "github-token")]


def test_line_numbers_are_one_based() -> None:
    with pytest.raises(ValueError, match="1-based"):
        scan_added_lines("f", [(0, "x")])


def test_result_data_shape() -> None:
    result = scan_added_lines("f", [(2, FAKES["npm-token"][0])])
    assert result.to_data() == {"findings": [result.findings[0].to_data()], "truncated": False}
    assert isinstance(result.findings[0], Finding)


# --- diffs ------------------------------------------------------------------------------------


def test_new_deleted_and_renamed_files() -> None:
    gh, aws, stripe = FAKES["github-token"][0], FAKES["aws-access-key-id"][0], FAKES["stripe-secret-key"][0]
    patch = f"""\
diff --git a/new.env b/new.env
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/new.env
@@ -0,0 +1,2 @@
+A=1
+{aws}
diff --git a/gone.env b/gone.env
deleted file mode 100644
index 3333333..0000000
--- a/gone.env
+++ /dev/null
@@ -1,2 +0,0 @@
-A=1
-{aws}
diff --git a/old/name.py b/new/name.py
similarity index 90%
rename from old/name.py
rename to new/name.py
index 4444444..5555555 100644
--- a/old/name.py
+++ b/new/name.py
@@ -4 +4 @@
-x = 1
+{gh}
diff --git a/pure/rename.py b/pure/renamed.py
similarity index 100%
rename from pure/rename.py
rename to pure/renamed.py
diff --git a/mode.sh b/mode.sh
old mode 100644
new mode 100755
diff --git a/last.py b/last.py
--- a/last.py
+++ b/last.py
@@ -9,0 +10 @@ class A:
+{stripe}
"""
    assert kinds(scan_patch(patch)) == [
        ("new.env", 2, "aws-access-key-id"),
        ("new/name.py", 4, "github-token"),
        ("last.py", 10, "stripe-secret-key"),
    ]


def test_binary_files_are_skipped() -> None:
    gh = FAKES["github-token"][0]
    patch = f"""\
diff --git a/img.png b/img.png
new file mode 100644
index 0000000..1111111
Binary files /dev/null and b/img.png differ
diff --git a/blob.bin b/blob.bin
index 2222222..3333333 100644
GIT binary patch
literal 12
@@ -1 +1 @@ looks like a hunk but is inside a binary patch
+{gh}

literal 0
HcmV?d00001

diff --git a/t.py b/t.py
--- a/t.py
+++ b/t.py
@@ -1 +1 @@
-a
+{gh}
"""
    assert kinds(scan_patch(patch)) == [("t.py", 1, "github-token")]


def test_crlf_patch_and_crlf_content() -> None:
    npm = FAKES["npm-token"][0]
    patch = f"diff --git a/w.txt b/w.txt\r\n--- a/w.txt\r\n+++ b/w.txt\r\n@@ -1,0 +2,2 @@\r\n+a\r\n+{npm}\r\n"
    assert kinds(scan_patch(patch)) == [("w.txt", 3, "npm-token")]
    # Content lines that end in \r inside an LF patch (what git prints for a CRLF file).
    patch = f"--- a/w.txt\n+++ b/w.txt\n@@ -1,0 +2,2 @@\n+a\r\n+{npm}\r\n"
    assert kinds(scan_patch(patch)) == [("w.txt", 3, "npm-token")]


def test_no_newline_at_end_of_file() -> None:
    google = FAKES["google-api-key"][0]
    patch = f"""\
--- a/t.txt
+++ b/t.txt
@@ -2 +2,2 @@
-y
\\ No newline at end of file
+y
+{google}
\\ No newline at end of file
--- a/u.txt
+++ b/u.txt
@@ -5 +5 @@
-old
\\ No newline at end of file
+{google}
\\ No newline at end of file
"""
    assert kinds(scan_patch(patch)) == [("t.txt", 3, "google-api-key"), ("u.txt", 5, "google-api-key")]


def test_hunk_bodies_are_read_by_their_counts() -> None:
    """An added line "++ b/evil" appears as "+++ b/evil": it must not switch the path."""
    gh = FAKES["github-token"][0]
    patch = f"""\
--- a/real.md
+++ b/real.md
@@ -1,2 +1,4 @@
 context
+++ b/evil
+-- a/evil
+{gh}
-removed
"""
    assert kinds(scan_patch(patch)) == [("real.md", 4, "github-token")]


def test_a_short_hunk_does_not_swallow_the_next_file() -> None:
    gh = FAKES["github-token"][0]
    patch = (
        "--- a/a\n+++ b/a\n@@ -1,5 +1,5 @@\n-x\n+y\n"  # says 5 lines, has 2
        f"diff --git a/b b/b\n--- a/b\n+++ b/b\n@@ -3 +3 @@\n-z\n+{gh}\n"
    )
    assert kinds(scan_patch(patch)) == [("b", 3, "github-token")]


def test_only_newlines_split_lines() -> None:
    """Git splits on \\n alone; a form feed or U+2028 inside a line must not shift the numbering."""
    gh = FAKES["github-token"][0]
    patch = f"--- a/a\n+++ b/a\n@@ -0,0 +1,3 @@\n+page\x0cbreak\n+para\u2028sep\n+{gh}\n"
    assert kinds(scan_patch(patch)) == [("a", 3, "github-token")]


def test_quoted_and_spaced_paths() -> None:
    gh = FAKES["github-token"][0]
    patch = (
        f'--- /dev/null\n+++ "b/docs/caf\\303\\251 \\"q\\".md"\n@@ -0,0 +1 @@\n+{gh}\n'
        f"--- a/with space.md\t\n+++ b/with space.md\t\n@@ -0,0 +1 @@\n+{gh}\n"
        f"--- x.md\t2024-01-01 00:00:00\n+++ y.md\t2024-01-01 00:00:01\n@@ -0,0 +1 @@\n+{gh}\n"
    )
    assert [f.path for f in scan_patch(patch).findings] == ['docs/café "q".md', "with space.md", "y.md"]


def test_hunk_counts_default_to_one() -> None:
    gh = FAKES["github-token"][0]
    assert kinds(scan_patch(f"+++ b/a\n@@ -3 +3 @@\n-x\n+{gh}\n+{gh}\n")) == [("a", 3, "github-token")]


GIT = shutil.which("git")


def git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env |= {
        "HOME": str(repo),
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    done = subprocess.run([GIT or "git", "-C", str(repo), *args], env=env, capture_output=True, check=True)
    return done.stdout.decode("utf-8", errors="surrogateescape")


@pytest.mark.skipif(GIT is None, reason="git is not installed")
def test_a_real_git_diff(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "core.autocrlf", "false")
    gh, aws, stripe = FAKES["github-token"][0], FAKES["aws-access-key-id"][0], FAKES["stripe-secret-key"][0]
    npm, google, slack = FAKES["npm-token"][0], FAKES["google-api-key"][0], FAKES["slack-token"][0]
    openai = FAKES["openai-api-key"][0]

    def write(name: str, data: str | bytes) -> None:
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)

    write("app/settings.py", f"import os\n\nDEBUG = False\nNAME = 'baton'\nOLD = '{gh}'\n")
    write("docs/old.md", "".join(f"line {i}\n" for i in range(1, 11)))
    write("win.txt", "a\r\nb\r\n")
    write("tail.txt", "x\ny")
    write("legacy.py", f"KEY = '{openai}'\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "tag", "base")

    write("app/settings.py", f"import os\n\nTOKEN = '{gh}'\nDEBUG = False\nNAME = 'baton'\n")
    write("conf/new.env", f"REGION=eu-west-1\n{aws}\n")
    (repo / "docs/old.md").unlink()
    write("docs/new.md", "".join(stripe + "\n" if i == 7 else f"line {i}\n" for i in range(1, 11)))
    write("data/blob.bin", b"\x00\x01\x02" + gh.encode() + b"\n\x00")
    write("win.txt", f"a\r\n{npm}\r\nb\r\n")
    write("tail.txt", f"x\ny\n{google}")
    write("docs/café notes.md", f"{slack}\n")
    (repo / "legacy.py").unlink()
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "head")

    patch = git(repo, "diff", "-U0", "-M", "--no-color", "--no-ext-diff", "base", "HEAD")
    assert "rename from docs/old.md" in patch
    assert "Binary files" in patch
    assert "\\ No newline" in patch
    result = scan_patch(patch)
    assert sorted(kinds(result)) == [
        ("app/settings.py", 3, "github-token"),
        ("conf/new.env", 2, "aws-access-key-id"),
        ("docs/café notes.md", 1, "slack-token"),
        ("docs/new.md", 7, "stripe-secret-key"),
        ("tail.txt", 3, "google-api-key"),
        ("win.txt", 2, "npm-token"),
    ]
    for finding in result.findings:  # the numbers point into the new files
        new_line = (repo / finding.path).read_text().split("\n")[finding.line - 1]
        assert scan_added_lines(finding.path, [(finding.line, new_line)]).findings == (finding,)


# --- bounds ---------------------------------------------------------------------------------------


def test_a_megabyte_line_is_scanned_only_in_its_head() -> None:
    gh = "ghp_" + body(36)
    # CPU time, not wall time (the suite shares its cores): a regex that backtracks on a megabyte
    # line takes minutes, so a bound this loose still fails it, and no busy machine flakes it.
    start = time.process_time()
    late = scan_added_lines("min.js", [(1, "a" * 1_000_000 + " " + gh)])
    early = scan_added_lines("min.js", [(1, "x " + gh + " " + "a" * 1_000_000)])
    cut = scan_added_lines("min.js", [(1, " " * (MAX_LINE_CHARS - 20) + gh)])  # straddles the bound
    assert time.process_time() - start < 5.0
    assert late.findings == ()
    assert cut.findings == ()
    assert kinds(early) == [("min.js", 1, "github-token")]


def test_many_lines_finish_fast_and_findings_are_capped() -> None:
    gh = "ghp_" + body(36)
    patch = "+++ b/big\n@@ -0,0 +1,100000 @@\n" + "".join(
        f"+line {i} goes through the high ways of sk learning, AKIA and xox\n" for i in range(100_000)
    )
    start = time.process_time()  # CPU time: see the megabyte-line test
    assert scan_patch(patch).findings == ()
    assert time.process_time() - start < 15.0

    start = time.process_time()
    result = scan_added_lines("big", ((i, f"t{i % 10} = '{gh}'") for i in range(1, 100_001)))
    assert time.process_time() - start < 15.0
    assert len(result.findings) == MAX_FINDINGS
    assert result.truncated is True
    assert result.findings[-1].line == MAX_FINDINGS


def test_exactly_max_findings_is_not_truncated() -> None:
    gh = "ghp_" + body(36)
    result = scan_added_lines("f", ((i, gh) for i in range(1, MAX_FINDINGS + 1)))
    assert len(result.findings) == MAX_FINDINGS
    assert result.truncated is False


# --- redaction ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_redact_removes_each_kind(kind: str) -> None:
    line, secret = FAKES[kind]
    out = redact(f"before\n{line}\nafter {line}")
    assert f"[redacted {kind}]" in out
    assert secret not in out
    assert secret[-8:] not in out
    assert out.startswith("before\n")


def test_redact_removes_a_whole_pem_block_and_keeps_what_follows() -> None:
    header, end = "-----BEGIN " + "RSA PRIVATE KEY-----", "-----END " + "RSA PRIVATE KEY-----"
    text = f"FAILED test_key\r\n{header}\r\n{PEM_BODY}\r\n{PEM_BODY[::-1]}\r\n{end}\r\n1 failed"
    assert redact(text) == "FAILED test_key\r\n[redacted private-key-block]\r\n1 failed"
    # No END line (output cut short): everything after the header goes.
    assert redact(f"ok\n{header}\n{PEM_BODY}\nmore") == "ok\n[redacted private-key-block]"


def test_redact_leaves_ordinary_output_alone() -> None:
    text = "===== 3 passed in 0.2s =====\nsha256:" + "ab" * 32 + "\nuses: actions/checkout@v4\n"
    assert redact(text) == text


def test_this_repository_stays_quiet() -> None:
    """The scanner's own module and tests, scanned as if added, have nothing to report."""
    for path in (Path(secrets.__file__), Path(__file__)):
        lines = path.read_text().split("\n")
        assert scan_added_lines(str(path), enumerate(lines, start=1)).findings == ()

"""`.env`: written once (0600, never over a file), read by `baton serve` and `baton worker`."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from baton import envfile
from baton.errors import ConfigError
from evidence.keys import SigningKey


def creds() -> envfile.Credentials:
    return envfile.Credentials(
        app_id=42,
        app_pem="-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n",
        webhook_secret="0123abcd" * 5,
        signing_key=SigningKey.generate(),
        audit_secret="f" * 64,
    )


def test_a_written_file_reads_back_and_every_key_is_private(tmp_path: Path) -> None:
    made = creds()
    written = envfile.write(tmp_path, made, comment="two\nlines")
    values = envfile.read(written.env)
    assert values == {
        "APP_ID": "42",
        "PRIVATE_KEY_PATH": str(tmp_path.resolve() / envfile.APP_KEY_NAME),
        "WEBHOOK_SECRET": made.webhook_secret,
        "BATON_SIGNING_KEY_PATH": str(written.signing_key),
        "BATON_AUDIT_SECRET": made.audit_secret,
    }
    assert written.env.read_text().startswith("# two\n# lines\n")
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {".env": 0o600, envfile.APP_KEY_NAME: 0o600, "baton-signing-key.pem": 0o600,
                     "baton-signing-key.pub.pem": 0o644}  # fmt: skip
    assert Path(values["PRIVATE_KEY_PATH"]).read_text() == made.app_pem
    assert SigningKey.from_pem(Path(values["BATON_SIGNING_KEY_PATH"]).read_bytes(), "k").keyid == (
        made.signing_key.keyid
    )


@pytest.mark.parametrize("there", [".env", envfile.APP_KEY_NAME, "baton-signing-key.pub.pem"])
def test_nothing_is_ever_overwritten_and_nothing_is_left_half_written(tmp_path: Path, there: str) -> None:
    (tmp_path / there).write_text("mine\n")
    with pytest.raises(FileExistsError):
        envfile.write(tmp_path, creds())
    assert [p.name for p in tmp_path.iterdir()] == [there]
    assert (tmp_path / there).read_text() == "mine\n"
    assert envfile.existing(tmp_path) == [tmp_path.resolve() / there]


def test_a_secret_that_would_not_survive_the_file_is_refused(tmp_path: Path) -> None:
    for bad in ("a,b", "two words", ""):
        with pytest.raises(ValueError, match="secret"):
            envfile.write(tmp_path, envfile.Credentials(**{**creds().__dict__, "webhook_secret": bad}))
    assert list(tmp_path.iterdir()) == []


def test_reading_quotes_comments_and_export(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    odd = 'a path/with space $and "quotes"'
    path.write_text(
        "# a comment\n\nexport A=plain\nB='single $quoted'\n"
        'C="double \\"q\\" \\n and \\$x"\nD=\nE=has=equals\n'
        "F=" + envfile.quote(odd) + "\n"
    )
    assert envfile.read(path) == {"A": "plain", "B": "single $quoted", "C": 'double "q" \n and $x', "D": "",
                                  "E": "has=equals", "F": odd}  # fmt: skip


@pytest.mark.parametrize(
    ("line", "message"),
    [("no equals sign", "expected NAME=value"), ("1BAD=x", "expected NAME=value"),
     ("A='open", "unclosed '"), ('A="open', 'unclosed "'), ('A="x" y', 'text after the closing "')],
)  # fmt: skip
def test_a_malformed_line_names_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / ".env"
    path.write_text(f"OK=1\n{line}\n")
    with pytest.raises(ConfigError) as caught:
        envfile.read(path)
    assert caught.value.code == "bad-env-file"
    assert f"{path}:2" in caught.value.message
    assert message in caught.value.message


def test_the_environment_wins_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_text("APP_ID=1\nWEBHOOK_SECRET=from-file\nLOG_LEVEL=DEBUG\n")
    environ = {"APP_ID": "2", "LOG_LEVEL": "  "}
    assert envfile.load_into(environ, path) == ["WEBHOOK_SECRET", "LOG_LEVEL"]
    assert environ == {"APP_ID": "2", "WEBHOOK_SECRET": "from-file", "LOG_LEVEL": "DEBUG"}
    assert envfile.load_into(environ, tmp_path / "absent") == []

"""`baton verify` on what `curl -s` saves when the receipt link's key is missing: a hint, same code."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidence import cli
from evidence.keys import SigningKey

#: What Baton's evidence endpoint answers a receipt request without its link's key (HTTP 403).
FORBIDDEN_BODY = '{"error": "a receipt is served only with its link\'s key or the operator\'s token"}'
#: What a proxy in front of Baton might answer instead.
HTML_BODY = "<html><head><title>403 Forbidden</title></head><body><h1>403 Forbidden</h1></body></html>\n"


@pytest.fixture
def key(tmp_path: Path) -> str:
    path = tmp_path / "baton.pub.pem"
    path.write_text(SigningKey.generate().public.pem())
    return str(path)


def test_an_error_body_is_malformed_envelope_with_a_hint(
    tmp_path: Path, key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "receipt.json"
    saved.write_text(FORBIDDEN_BODY)
    assert cli.main(["verify", str(saved), "--key", key]) == 1
    err = capsys.readouterr().err
    assert err.startswith("invalid: malformed-envelope: ")  # the code is kept
    assert "this is not a DSSE envelope" in err
    assert "the link's key may be missing (HTTP 403)" in err
    assert "link's key or the operator's token" in err  # what the server said, quoted


def test_an_html_page_is_not_json_with_the_same_hint(
    tmp_path: Path, key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "receipt.json"
    saved.write_text(HTML_BODY)
    assert cli.main(["verify", str(saved), "--key", key]) == 2
    err = capsys.readouterr().err
    assert "is not valid JSON" in err
    assert "this is not a DSSE envelope" in err
    assert "the link's key may be missing (HTTP 403)" in err


def test_an_envelope_missing_its_payload_has_no_download_hint(
    tmp_path: Path, key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "receipt.json"
    saved.write_text('{"payloadType": "application/vnd.in-toto+json", "signatures": []}')
    assert cli.main(["verify", str(saved), "--key", key]) == 1
    assert "HTTP 403" not in capsys.readouterr().err

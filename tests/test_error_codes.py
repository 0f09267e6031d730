"""Every error code the source gives is registered once, with a public sentence and a fix.

The codes are found by reading baton/, bot/ and worker/ with ``ast`` (``tests/code_scan.py``), so
a new ``raise BatonError("new-code", ...)`` fails here until ``baton/codes.py`` registers it; a code
given through anything but a literal or a registry constant fails too. evidence/ is held to its own
registry, ``evidence.errors.CODES``, the same way.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from baton import codes
from baton.errors import BatonError
from bot.evidence import BadRequest, Forbidden, NotFound
from bot.routing import PayloadError
from evidence.audit import AuditError
from evidence.errors import CODES, EvidenceError
from evidence.log import LogBusy
from tests.code_scan import Given, Scan

ROOT = Path(__file__).resolve().parent.parent
#: Each registry constant's name -> its code.
CONSTANTS = {
    name: value
    for name, value in vars(codes).items()
    if name.isupper() and isinstance(value, str) and value in codes.REGISTRY
}


def _baton_scan() -> Scan:
    return Scan.of_packages(
        ROOT, ("baton", "bot", "worker"), root="BatonError", registry="baton.codes", constants=CONSTANTS
    )


def _planted(source: str, **more: str) -> list[Given]:
    """What the scan finds in a made-up package beside a tiny registry (``reg``)."""
    sources = {
        "reg": ("reg.py", 'KNOWN = "known"\n'),
        "pkg.errors": ("pkg/errors.py", "class BatonError(Exception):\n    pass\n"),
        "pkg.mod": ("pkg/mod.py", textwrap.dedent(source)),
        **{name: (name.replace(".", "/") + ".py", textwrap.dedent(text)) for name, text in more.items()},
    }
    return Scan(sources, root="BatonError", registry="reg", constants={"KNOWN": "known"}).given()


def test_each_code_is_registered_once() -> None:
    names = [entry.code for entry in codes.ENTRIES]
    assert len(names) == len(set(names)) == len(codes.REGISTRY)


def test_each_code_has_a_public_sentence_and_a_fix() -> None:
    for entry in codes.ENTRIES:
        for text in (entry.sentence, entry.fix):
            assert text.strip() == text, entry.code
            assert text.endswith("."), entry.code
            assert "{" not in text, entry.code  # no template left unfilled
            assert "://" not in text, entry.code  # no address
        assert not re.search(r"\b(Traceback|Exception|redis://)\b", entry.sentence), entry.code


def test_every_code_raised_in_baton_bot_and_worker_is_registered() -> None:
    given = _baton_scan().given()
    assert len(given) > 100  # the scan sees the raise sites (143 when written)
    assert [g for g in given if g.problem] == []
    assert sorted({f"{g.value} ({g.file}:{g.line})" for g in given if g.value not in codes.REGISTRY}) == []


def test_every_code_raised_in_evidence_is_in_its_registry() -> None:
    given = Scan.of_packages(
        ROOT, ("evidence",), root="EvidenceError", registry="evidence.errors", constants={}
    )
    found = given.given()
    assert [g for g in found if g.problem] == []
    assert {g.value for g in found} == CODES  # and nothing registered is left unused


def test_registry_constants_name_registered_codes() -> None:
    assert CONSTANTS["AGENT_MISSING"] == "runner.agent_missing"
    assert set(CONSTANTS.values()) <= set(codes.REGISTRY)


@pytest.mark.parametrize(
    "source",
    [
        # a literal that is not registered
        'from pkg.errors import BatonError\nraise BatonError("unheard-of", "m")\n',
        # ``code=`` keyword, on a subclass
        "from pkg.errors import BatonError\nclass Sub(BatonError):\n    pass\n"
        'def f():\n    raise Sub(code="unheard-of", message="m")\n',
        # fixed by the subclass's own __init__
        "from pkg.errors import BatonError\nclass Fixed(BatonError):\n"
        '    def __init__(self, message):\n        super().__init__("unheard-of", message)\n',
        # through a helper that forwards its parameter, given by keyword
        "from pkg.errors import BatonError\ndef fail(*, why):\n    return BatonError(why, 'm')\n"
        'def g():\n    raise fail(why="unheard-of")\n',
        # an error class imported under another name
        'from pkg.errors import BatonError as Oops\nraise Oops("unheard-of", "m")\n',
        # a local variable's every assignment counts
        "from pkg.errors import BatonError\ndef f(x):\n    code = 'known'\n    if x:\n"
        "        code = 'unheard-of'\n    raise BatonError(code, 'm')\n",
    ],
)
def test_the_scan_finds_an_unregistered_code(source: str) -> None:
    found = _planted(source)
    assert [g.value for g in found if g.value != "known"] == ["unheard-of"]


@pytest.mark.parametrize(
    ("source", "culprit"),
    [
        # a literal behind a module-level name: it must be a registry constant instead
        ('from pkg.errors import BatonError\nCODE = "known"\nraise BatonError(CODE, "m")\n', "CODE"),
        # anything computed
        ('from pkg.errors import BatonError\ndef f(x):\n    raise BatonError(x.kind, "m")\n', "x.kind"),
        ('from pkg.errors import BatonError\nraise BatonError("kn" + "own", "m")\n', "'kn' + 'own'"),
        # an error whose __init__ takes the code elsewhere than first: its callers would go unread
        (
            "from pkg.errors import BatonError\nclass Late(BatonError):\n"
            "    def __init__(self, message, why):\n        super().__init__(why, message)\n",
            "why",
        ),
        # a name the registry does not define
        (
            'from reg import MISSING\nfrom pkg.errors import BatonError\nraise BatonError(MISSING, "m")\n',
            "MISSING",
        ),
    ],
)
def test_the_scan_fails_on_a_code_that_is_not_a_literal_nor_a_registry_constant(
    source: str, culprit: str
) -> None:
    found = _planted(source)
    assert len(found) == 1
    assert found[0].value is None
    assert repr(culprit) in found[0].problem


def test_the_scan_follows_registry_constants_through_imports_and_aliases() -> None:
    found = _planted(
        "from pkg.names import ALIAS\nfrom pkg.errors import BatonError\nimport reg\n"
        "raise BatonError(ALIAS, 'm')\nraise BatonError(reg.KNOWN, 'm')\n",
        **{"pkg.names": "import reg\nALIAS = reg.KNOWN\n"},
    )
    assert [(g.value, g.problem) for g in found] == [("known", ""), ("known", "")]


def test_a_caught_errors_code_passed_on_is_not_a_new_code() -> None:
    found = _planted(
        "from pkg.errors import BatonError\ndef f():\n    try:\n        g()\n"
        "    except BatonError as exc:\n        raise BatonError(exc.code, 'again') from exc\n"
    )
    assert found == []


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (PayloadError("payload has no object 'installation'"), codes.BAD_PAYLOAD),
        (BadRequest("start is required"), codes.BAD_REQUEST),
        (NotFound("no log"), codes.NOT_FOUND),
        (Forbidden("not served"), codes.FORBIDDEN),
    ],
)
def test_the_web_processes_errors_are_baton_errors_with_registered_codes(
    error: BatonError, code: str
) -> None:
    assert isinstance(error, BatonError)
    assert error.code == code
    assert code in codes.REGISTRY
    assert str(error) == error.message  # the JSON answers show str(exc): unchanged


def test_the_evidence_packages_errors_are_evidence_errors() -> None:
    assert issubclass(LogBusy, EvidenceError)
    assert issubclass(AuditError, EvidenceError)
    assert not issubclass(EvidenceError, BatonError)  # evidence must run without Baton's server side

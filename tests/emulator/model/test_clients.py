"""Provider-neutral steps rendered for a client (pure): the shell renderings really run, the argument
names follow the offered schema, and a step no offered tool can carry is refused by name."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from emulator.model.clients import MINI_SUBMIT, Call, Offer, Say, render, shell_command
from emulator.model.script import Answer, Bash, Edit, Read, Text, Tool, Write
from emulator.model.wire import RenderError

SHELL_ONLY = Offer({"bash": {"type": "object", "properties": {"command": {}}, "required": ["command"]}}, "")


def _sh(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=30, check=False
    )


def _command(answer: Answer, workspace: str | None = None) -> str:
    call = render(answer, SHELL_ONLY, workspace)
    assert isinstance(call, Call)
    assert call.name == "bash"
    command: str = call.args["command"]
    return command


@pytest.mark.parametrize(
    "content",
    ["hello\nworld\n", "no final newline", "quotes ' \" $HOME `x` \\ and EOF-ish EOFX\n", "", "\n\n"],
)
def test_a_write_as_a_shell_command_writes_exactly_the_content(tmp_path: Path, content: str) -> None:
    done = _sh(_command(Write(0, "sub dir/f.txt", content)), tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "sub dir" / "f.txt").read_text() == content


def test_a_write_uses_a_quoted_heredoc_when_the_content_ends_a_line() -> None:
    assert _command(Write(0, "/w/f.txt", "a $x\n")) == "mkdir -p /w && cat > /w/f.txt <<'EOF'\na $x\nEOF"


def test_an_edit_as_a_shell_command_replaces_the_first_occurrence_only(tmp_path: Path) -> None:
    target = tmp_path / "a.py"
    target.write_text("x = 'it''s'\nx = 'it''s'\n")
    done = _sh(_command(Edit(0, str(target), "x = 'it''s'", 'y = "$HOME"')), tmp_path)
    assert done.returncode == 0, done.stderr
    assert target.read_text() == "y = \"$HOME\"\nx = 'it''s'\n"


def test_an_edit_whose_old_text_is_missing_fails_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    done = _sh(_command(Edit(0, "a.py", "nope", "y")), tmp_path)
    assert done.returncode != 0
    assert "the old text is not there" in done.stderr
    assert (tmp_path / "a.py").read_text() == "x = 1\n"


def test_a_read_is_cat_and_relative_paths_go_under_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text("content\n")
    assert _sh(_command(Read(0, "r.txt")), tmp_path).stdout == "content\n"
    assert _command(Read(0, "r.txt"), "/ws") == "cat /ws/r.txt"


def test_the_final_text_submits_only_for_mini_swe_agent() -> None:
    marked = Offer(SHELL_ONLY.tools, f"finish with echo {MINI_SUBMIT}")
    assert render(Text(3, "done"), marked, None) == Call("bash", {"command": f"echo {MINI_SUBMIT}"})
    assert render(Text(3, "done"), SHELL_ONLY, None) == Say("done")
    assert render(Text(3, "done"), Offer({}, f"echo {MINI_SUBMIT}"), None) == Say("done")


def test_a_tool_step_is_sent_as_given() -> None:
    assert render(Tool(0, "anything", {"a": 1}), SHELL_ONLY, None) == Call("anything", {"a": 1})


def test_native_tools_win_over_the_shell_and_keys_follow_the_schema() -> None:
    schema = {"properties": {"path": {}, "content": {}}, "required": ["path", "content"]}
    offer = Offer({"write_file": schema, **SHELL_ONLY.tools}, "")
    assert render(Write(0, "/a", "x"), offer, None) == Call("write_file", {"path": "/a", "content": "x"})


def test_a_missing_shell_is_refused_naming_the_step_and_the_offered_tools() -> None:
    offer = Offer({"glob": {}, "grep": {}}, "")
    with pytest.raises(RenderError, match=r'step 4 \(bash\): the request offers none of .*"glob", "grep"'):
        render(Bash(4, "ls"), offer, None)


def test_aider_read_and_bash_are_refused() -> None:
    offer = Offer({}, "You MUST use this *file listing* format:")
    with pytest.raises(RenderError, match="Aider has no tools"):
        render(Read(1, "a"), offer, None)


def test_aider_fences_grow_past_backticks_in_the_content() -> None:
    offer = Offer({}, "You MUST use this *file listing* format:")
    assert render(Write(0, "README.md", "```sh\nls\n```\n"), offer, None) == Say(
        "README.md\n````\n```sh\nls\n```\n````\n"
    )


def test_shell_command_quotes_a_path_with_spaces() -> None:
    assert shell_command(Read(0, "/a b"), "/a b") == "cat '/a b'"

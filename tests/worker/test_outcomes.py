"""One vocabulary for how a run ends: every outcome has an exit code and a task state."""

from __future__ import annotations

from baton.tasks import Outcome
from worker import lifecycle
from worker.lifecycle import State
from worker.runner import run as runner


def test_every_outcome_has_an_exit_code_and_a_state() -> None:
    assert set(runner.EXIT) == set(Outcome)
    assert set(lifecycle.OUTCOME_STATE) == set(Outcome)
    assert runner.EXIT[Outcome.CONFLICT] != 0  # a run that pushed nothing over foreign commits failed


def test_outcome_states_are_terminal_and_queued_means_only_queued() -> None:
    assert all(state in lifecycle.TERMINAL for state in lifecycle.OUTCOME_STATE.values())
    assert lifecycle.state_of(Outcome.TIMED_OUT) is State.TIMED_OUT


def test_a_record_from_before_accepted_was_removed_reads_as_done() -> None:
    assert "accepted" not in {s.value for s in State}
    assert lifecycle._state(b"accepted") is State.DONE

"""What one redelivery pass decides, from GitHub's listing and what Redis holds (no I/O)."""

from __future__ import annotations

from worker.redeliver import MAX_ATTEMPTS, Attempt, _next_cursor, next_wait, plan


def attempt(id_: int, guid: str, status: int, at: float | None = None) -> Attempt:
    return Attempt(id_, guid, float(at if at is not None else id_), status, "issues", "labeled")


def test_a_delivery_never_stored_and_never_answered_2xx_is_redelivered_oldest_first() -> None:
    found = plan([attempt(3, "b", 503), attempt(1, "a", 503), attempt(2, "c", 0)],
                 stored=set(), requested={}, given_up=set())  # fmt: skip
    assert [a.guid for a in found.redeliver] == ["a", "c", "b"]  # the order maintainers acted in
    assert found.failed == 3


def test_stored_or_once_successful_deliveries_are_left_alone() -> None:
    listed = [attempt(1, "stored", 503), attempt(2, "later-ok", 503), attempt(3, "later-ok", 202)]
    found = plan(listed, stored={"stored"}, requested={}, given_up=set())
    assert found.redeliver == []
    assert found.failed == 0
    assert found.recovered == []  # Baton never asked for "stored": not its recovery


def test_the_newest_attempt_is_the_one_asked_for_and_a_guid_stops_at_three_attempts() -> None:
    two = [attempt(1, "g", 503), attempt(5, "g", 503)]
    [again] = plan(two, stored=set(), requested={"g": 1}, given_up=set()).redeliver
    assert again.id == 5
    three = [*two, attempt(9, "g", 503)]
    found = plan(three, stored=set(), requested={"g": 2}, given_up=set())
    assert (found.redeliver, found.given_up) == ([], ["g"])
    # Counted once: a guid already given up is not given up again, nor redelivered.
    found = plan(three, stored=set(), requested={"g": 2}, given_up={"g"})
    assert (found.redeliver, found.given_up) == ([], [])
    # Baton's own count is trusted when GitHub lists fewer attempts (older ones aged out of a page).
    found = plan([attempt(9, "h", 503)], stored=set(), requested={"h": MAX_ATTEMPTS - 1}, given_up=set())
    assert found.given_up == ["h"]


def test_a_4xx_is_redelivered_only_when_the_operator_says_so() -> None:
    listed = [attempt(1, "sig", 401)]
    assert plan(listed, stored=set(), requested={}, given_up=set()).redeliver == []
    assert len(plan(listed, stored=set(), requested={}, given_up=set(), include_4xx=True).redeliver) == 1


def test_a_requested_guid_that_is_now_stored_counts_as_recovered() -> None:
    found = plan([attempt(1, "g", 503)], stored={"g"}, requested={"g": 1}, given_up=set())
    assert found.recovered == ["g"]


def test_at_most_max_per_pass_and_the_rest_deferred() -> None:
    listed = [attempt(i, f"g{i}", 503) for i in range(1, 8)]
    found = plan(listed, stored=set(), requested={}, given_up=set(), max_per_pass=5)
    assert [a.id for a in found.redeliver] == [1, 2, 3, 4, 5]
    assert found.deferred == 2


def test_redelivering_into_an_outage_backs_off_and_a_recovery_resets() -> None:
    assert next_wait(300, 300, asked=[], recovered=set()) == 300
    assert next_wait(300, 300, asked=["a"], recovered=set()) == 600
    assert next_wait(300, 2400, asked=["a"], recovered=set()) == 3600  # an hour at most
    assert next_wait(300, 3600, asked=["a"], recovered=set()) == 3600
    assert next_wait(300, 2400, asked=["a", "b"], recovered={"b"}) == 300


def test_the_next_cursor_is_read_from_githubs_link_header() -> None:
    link = (
        '<https://api.github.com/app/hook/deliveries?per_page=2&cursor=v1_12345>; rel="next", '
        '<https://api.github.com/app/hook/deliveries?per_page=2>; rel="first"'
    )
    assert _next_cursor(link) == "v1_12345"
    assert _next_cursor('<https://api.github.com/app/hook/deliveries?per_page=2>; rel="first"') is None
    assert _next_cursor("") is None

"""The box's sizes in a policy: memory and disk of one agent run, written 512MiB, 4GiB or bytes."""

from __future__ import annotations

import pytest
import yaml

from worker.policy import DEFAULT_POLICY, Merged, PolicyError, merge, org_policy, parse
from worker.policy.model import Limits
from worker.policy.sizes import GiB, MiB, TiB, format_size, parse_size

ORG = "version: 1\nlimits: {max_agent_memory: 2GiB, max_workspace_bytes: 5GiB}\n"
CEILING = org_policy(parse(ORG, "org.yml"))


def _merge(repo: str) -> Merged:
    return merge(CEILING, parse(repo, ".github/baton.yml"))


def test_defaults_are_4_gib_of_memory_and_10_gib_of_disk() -> None:
    limits = DEFAULT_POLICY.limits
    assert (limits.max_agent_memory, limits.max_workspace_bytes) == (4 * GiB, 10 * GiB)


@pytest.mark.parametrize(
    ("written", "size"),
    [("512MiB", 512 * MiB), ("4GiB", 4 * GiB), ("1TiB", TiB), ("65536KiB", 64 * MiB),
     (4294967296, 4 * GiB), ("4294967296", 4 * GiB), (4294967296.0, 4 * GiB)],
)  # fmt: skip
def test_an_org_file_writes_a_size_with_a_binary_unit_or_in_bytes(written: object, size: int) -> None:
    text = yaml.safe_dump({"version": 1, "limits": {"max_agent_memory": written}})
    assert org_policy(parse(text, "org.yml")).limits.max_agent_memory == size


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("4GB", "limits.max_agent_memory: '4GB' is not a size; decimal units (GB) are not accepted, so "
         "that no one has to guess which is meant: write 4GiB (4294967296 bytes) or the bytes themselves "
         "(4000000000)"),
        ("4G", "limits.max_agent_memory: '4G' is not a size; write 4GiB (the units are KiB, MiB, GiB and "
         "TiB, spelt so)"),
        ("4 gib", "limits.max_agent_memory: '4 gib' is not a size; write 4GiB"),
        ("1.5GiB", "limits.max_agent_memory: '1.5GiB' is not a size; a size is a whole number of its unit: "
         "write 1536MiB"),
        ("lots", "limits.max_agent_memory: 'lots' is not a size; write it like 512MiB or 4GiB (binary units "
         "KiB, MiB, GiB, TiB) or as a whole number of bytes"),
        ("true", "limits.max_agent_memory: true is not a size; write it like 512MiB"),
        ("0", "limits.max_agent_memory: 0 is not a size"),
        ("32MiB", "limits.max_agent_memory: 32MiB is below the floor of 64MiB (an agent CLI cannot start "
         "in less); write at least 64MiB"),
        ("1048576", "limits.max_agent_memory: 1MiB is below the floor of 64MiB"),
        ("2TiB", "limits.max_agent_memory: 2TiB is above the most Baton accepts; write at most 1TiB"),
        ("2199023255552", "limits.max_agent_memory: 2TiB is above the most Baton accepts"),
    ],
)  # fmt: skip
def test_a_bad_size_names_file_line_field_and_what_to_write(value: str, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse(f"version: 1\nlimits:\n  max_agent_memory: {value}\n", "org.yml")
    [problem] = caught.value.problems
    assert (problem.file, problem.line, problem.col) == ("org.yml", 3, 21)
    assert problem.message.startswith(message), problem.message


def test_the_workspace_has_its_own_floor() -> None:
    assert org_policy(parse("version: 1\nlimits: {max_workspace_bytes: 16MiB}\n", "o.yml"))
    with pytest.raises(PolicyError, match=r"limits.max_workspace_bytes: 8MiB is below the floor of 16MiB"):
        parse("version: 1\nlimits: {max_workspace_bytes: 8MiB}\n", "o.yml")


def test_a_repository_lowers_the_sizes() -> None:
    merged = _merge("version: 1\nlimits: {max_agent_memory: 1GiB, max_workspace_bytes: 1073741824}\n")
    assert merged.ok, merged.problems
    assert (merged.policy.limits.max_agent_memory, merged.policy.limits.max_workspace_bytes) == (GiB, GiB)


def test_a_repository_raising_a_size_is_dropped_and_reported_and_its_other_narrowings_kept() -> None:
    merged = _merge("version: 1\nlimits: {max_agent_memory: 3GiB, max_workspace_bytes: 1GiB}\n")
    assert [(p.file, p.line, p.col, p.message) for p in merged.problems] == [
        (".github/baton.yml", 2, 28,
         "limits.max_agent_memory: 3GiB is above the org's 2GiB; a repository may only lower it"),
    ]  # fmt: skip
    assert merged.policy.limits.max_agent_memory == 2 * GiB  # the org's ceiling, not what was asked
    assert merged.policy.limits.max_workspace_bytes == GiB
    with pytest.raises(PolicyError):
        merged.raise_for_widening()


def test_without_an_org_file_a_repository_may_not_raise_the_defaults() -> None:
    merged = merge(org_policy(None), parse("version: 1\nlimits: {max_agent_memory: 8GiB}\n", "r.yml"))
    assert [p.message for p in merged.problems] == [
        "limits.max_agent_memory: 8GiB is above the org's 4GiB; a repository may only lower it"
    ]
    assert merged.policy == DEFAULT_POLICY


def test_sizes_are_in_the_effective_policy_and_its_digest_and_round_trip() -> None:
    data = CEILING.to_data()["limits"]
    assert isinstance(data, dict)
    assert (data["max_agent_memory"], data["max_workspace_bytes"]) == ("2GiB", "5GiB")
    again = org_policy(parse(yaml.safe_dump({"version": 1, "limits": data}), "org.yml"))
    assert again.limits == CEILING.limits
    assert again.digest == CEILING.digest != DEFAULT_POLICY.digest
    lowered = _merge("version: 1\nlimits: {max_workspace_bytes: 4GiB}\n").policy
    assert lowered.digest != CEILING.digest


def test_a_policy_at_the_default_sizes_keeps_the_digest_it_had_before_they_existed() -> None:
    """Decisions recorded before this release name that digest, and ``baton replay`` recomputes it."""
    assert "max_agent_memory" not in DEFAULT_POLICY.to_data()["limits"]  # type: ignore[operator]
    spelt = org_policy(parse("version: 1\nlimits: {max_agent_memory: 4096MiB}\n", "org.yml"))
    assert spelt.digest == org_policy(parse("version: 1\n", "org.yml")).digest == DEFAULT_POLICY.digest


def test_one_spelling_per_size() -> None:
    assert [format_size(n) for n in (4 * GiB, 4096 * MiB, 1536 * MiB, 1000, TiB)] == [
        "4GiB", "4GiB", "1536MiB", "1000", "1TiB"
    ]  # fmt: skip
    assert Limits(max_agent_memory=4096 * MiB) == Limits()


@pytest.mark.parametrize("junk", [None, True, -1, 0, 1.5, "", "x", "٣GiB", "4GiB\n", "9" * 40, [], {}])
def test_the_size_parser_refuses_junk_with_value_error(junk: object) -> None:
    with pytest.raises(ValueError, match="is not a"):
        parse_size(junk)

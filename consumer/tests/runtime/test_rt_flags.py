"""The consumer process's identity flags: ``--help`` states their limits, and a value
outside them is a usage error naming the flag."""

from __future__ import annotations

import pytest

from gazette.consumer.runtime import config

APP = ["--consumer.app", "unused:Unused"]


def test_help_states_the_id_and_zone_limits(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        config.parse(["--help"], env={})
    out = " ".join(capsys.readouterr().out.split())
    assert "within its zone: 4-128 letters, digits or -_+/." in out
    assert "Zone of this process: 1-32 letters, digits or -_+/." in out


@pytest.mark.parametrize(
    ("args", "flag", "rule"),
    [
        (["--consumer.id", "c0"], "--consumer.id", "expected 4 <= length <= 128"),
        (["--consumer.id", "c 00"], "--consumer.id", "not a valid token"),
        (
            ["--consumer.zone", "a b", "--consumer.id", "c000"],
            "--consumer.zone",
            "not a valid token",
        ),
    ],
)
def test_an_id_outside_the_limits_names_its_flag(
    capsys: pytest.CaptureFixture[str], args: list[str], flag: str, rule: str
) -> None:
    with pytest.raises(SystemExit) as info:
        config.parse([*APP, *args], env={})
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"error: {flag}: " in err and rule in err, err

"""The one configuration mechanism: defaults < pyproject < phoenix.toml < env < arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from phoenix_protocol.core._config import SETTINGS, Config, load_config
from phoenix_protocol.core._errors import ConfigError


def test_defaults() -> None:
    config = Config()
    assert config.brief_max_chars == 10_000
    assert set(config.as_dict()) == set(SETTINGS)
    assert all(source == "default" for source in config.sources.values())


def test_layers_in_order(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.phoenix]\nlock_timeout = 3\nops_keep = 2\nbrief_max_chars = 5000\n")
    home = tmp_path / ".phoenix"
    home.mkdir()
    (home / "phoenix.toml").write_text("ops_keep = 4\nbrief-max-chars = 6000\n")
    config = load_config(
        str(home),
        project_root=str(tmp_path),
        env={"PHOENIX_BRIEF_MAX_CHARS": "7000"},
        overrides={"heartbeat_log_interval": 5},
    )
    assert config.lock_timeout == 3.0 and config.ops_keep == 4 and config.brief_max_chars == 7000
    assert config.heartbeat_log_interval == 5.0
    assert config.sources["brief_max_chars"] == "PHOENIX_BRIEF_MAX_CHARS"
    assert config.sources["ops_keep"].endswith("phoenix.toml")


def test_replace_is_load_config_with_overrides(tmp_path: Path) -> None:
    """``Config.replace`` applies overrides to a configuration already read, as ``load_config``'s
    ``overrides`` do (the CLI's flags), without reading the files again."""
    (tmp_path / "phoenix.toml").write_text("ops_keep = 4\nwatchdog_grace = 30\n")
    config = load_config(str(tmp_path), env={})
    replaced = config.replace({"watchdog_grace": 5})
    assert replaced.as_dict() == load_config(str(tmp_path), env={}, overrides={"watchdog_grace": 5}).as_dict()
    assert replaced.sources["watchdog_grace"] == "argument" and replaced.sources["ops_keep"].endswith("phoenix.toml")
    assert config.watchdog_grace == 30.0  # the original is unchanged
    with pytest.raises(ConfigError, match="at least 1"):
        config.replace({"ops_keep": 0})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ops_keep = 'many'", "must be a int"),
        ("ops_keep = 0", "at least 1"),
        ("no_such = 1", "unknown setting"),
        ("ops_keep = ", "not valid TOML"),
        ("ops_keep = true", "must be a int"),
    ],
)
def test_bad_values_name_their_source(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "phoenix.toml").write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        load_config(str(tmp_path), env={})
    assert "phoenix.toml" in str(info.value) or "TOML" in str(info.value)


def test_bad_environment_value() -> None:
    with pytest.raises(ConfigError, match="PHOENIX_LOCK_TIMEOUT"):
        load_config(None, env={"PHOENIX_LOCK_TIMEOUT": "soon"})


@pytest.mark.parametrize("literal", ["inf", "-inf", "nan", "+inf"])
@pytest.mark.parametrize("name", ["recovery_retention_days", "refresh_after_minutes", "checkpoint_interval_minutes"])
def test_non_finite_numbers_are_refused_from_every_source(tmp_path: Path, name: str, literal: str) -> None:
    # TOML has inf and nan, and nan passes every bound (nan < 0 is false): checkpoint writes then
    # crashed converting them to milliseconds (OverflowError, ValueError).
    (tmp_path / "phoenix.toml").write_text(f"{name} = {literal}\n")
    with pytest.raises(ConfigError, match=f"{name} in .*phoenix.toml must be a finite number"):
        load_config(str(tmp_path), env={})
    (tmp_path / "pyproject.toml").write_text(f"[tool.phoenix]\n{name} = {literal}\n")
    with pytest.raises(ConfigError, match=r"pyproject.toml \[tool.phoenix\] must be a finite number"):
        load_config(None, project_root=str(tmp_path), env={})
    with pytest.raises(ConfigError, match=f"PHOENIX_{name.upper()} must be a finite number"):
        load_config(None, env={f"PHOENIX_{name.upper()}": literal})
    with pytest.raises(ConfigError, match=f"{name} in argument must be a finite number"):
        load_config(None, env={}, overrides={name: float(literal)})
    with pytest.raises(ConfigError, match="finite"):
        Config({name: float(literal)})


NUMBERS = [name for name, (kind, *_rest) in SETTINGS.items() if kind in (int, float)]


def test_every_number_has_a_documented_range() -> None:
    import re

    table = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    for name in NUMBERS:
        _kind, default, minimum, maximum, _doc = SETTINGS[name]
        assert minimum is not None and maximum is not None, name
        assert minimum <= default <= maximum, name
        low, high = (str(int(b)) if float(b).is_integer() else str(b) for b in (minimum, maximum))
        assert re.search(rf"^\| `{name}` \| [^|]* \| {low} to {high}\b", table, re.MULTILINE), name


@pytest.mark.parametrize(
    ("name", "literal", "bound"),
    [
        ("recovery_retention_days", "1e305", "at most 36500"),  # overflowed converting to milliseconds
        ("watchdog_interval", "1e15", "at most 31536000"),  # time.sleep / Event.wait: OverflowError
        ("lock_timeout", "1e15", "at most 31536000"),  # Lock.acquire / setitimer: OverflowError
        ("checkpoint_interval_minutes", "1e9", "at most 525600"),
        ("server_port", "99999", "at most 65535"),
        ("persona_threshold", "1.5", "at most 1"),
        ("ops_keep", "1000000", "at most 10000"),
    ],
)
def test_numbers_out_of_range_are_refused_from_every_source(
    tmp_path: Path, name: str, literal: str, bound: str
) -> None:
    (tmp_path / "phoenix.toml").write_text(f"{name} = {literal}\n")
    with pytest.raises(ConfigError, match=f"{name} in .*phoenix.toml must be {bound}, got"):
        load_config(str(tmp_path), env={})
    (tmp_path / "pyproject.toml").write_text(f"[tool.phoenix]\n{name} = {literal}\n")
    with pytest.raises(ConfigError, match=rf"pyproject.toml \[tool.phoenix\] must be {bound}, got"):
        load_config(None, project_root=str(tmp_path), env={})
    with pytest.raises(ConfigError, match=f"PHOENIX_{name.upper()} must be {bound}, got"):
        load_config(None, env={f"PHOENIX_{name.upper()}": literal})
    with pytest.raises(ConfigError, match=f"{name} in argument must be {bound}, got"):
        load_config(None, env={}, overrides={name: float(literal)})
    with pytest.raises(ConfigError, match=bound):
        Config({name: float(literal)})


@pytest.mark.parametrize("name", NUMBERS)
def test_each_number_is_refused_just_above_its_maximum(name: str) -> None:
    kind, _default, _minimum, maximum, _doc = SETTINGS[name]
    assert maximum is not None
    assert getattr(Config({name: maximum}), name) == maximum
    above = maximum + 1 if kind is int else maximum * 1.001
    with pytest.raises(ConfigError, match=f"setting {name} in PHOENIX_{name.upper()} must be at most"):
        load_config(None, env={f"PHOENIX_{name.upper()}": str(above)})


def test_the_maximum_stands_for_no_limit_and_is_safe_where_it_is_used(project: Path) -> None:
    # Every number at its maximum, through the hooks, checkpoints, retention, brief and watchdog:
    # nothing may overflow (the maximums are what "no limit" means now).
    import json
    import threading

    from phoenix_protocol import Agent, Home
    from phoenix_protocol.integrations._hooks import run
    from phoenix_protocol.services._watchdog import run_pass

    maxima: dict[str, float] = {}
    for name in NUMBERS:
        maximum = SETTINGS[name][3]
        assert maximum is not None
        maxima[name] = maximum
    home = project / ".phoenix"
    home.mkdir()
    (home / "phoenix.toml").write_text("".join(f"{name} = {value!r}\n" for name, value in maxima.items()))
    assert load_config(str(home), env={}).as_dict() == {**Config().as_dict(), **maxima}
    for name in NUMBERS:  # seconds go to Lock.acquire, Event.wait, time.sleep and setitimer
        if SETTINGS[name][4].startswith("Seconds"):
            assert threading.Lock().acquire(True, maxima[name])

    def hook(command: str, event: str, **extra: object) -> None:
        body = {"session_id": "s1", "transcript_path": "/tmp/t.jsonl", "cwd": str(project), "hook_event_name": event}
        code, _out, err = run([command], json.dumps({**body, **extra}).encode())
        assert (code, err) == (0, ""), err

    hook("session-start", "SessionStart", source="startup")
    for i in range(3):
        hook("post-tool-use", "PostToolUse", tool_name="Bash", tool_input={"command": f"echo {i}"}, tool_response={})
    agent = Agent.open("default", home=Home(str(home)))
    assert agent.checkpoints.maybe_checkpoint() == []
    assert agent.checkpoints.create("recovery").checkpoint_type == "recovery"
    agent.checkpoints.prune()
    agent.checkpoints.flush()
    assert "Current State" in agent.render_brief()
    run_pass(Home(str(home)), act=False)
    hook("session-end", "SessionEnd", reason="other")


def _shown(literal: str) -> str:
    """A TOML literal as the error shows it: true/false, or the Python repr."""
    import tomllib

    value = tomllib.loads(f"v = {literal}")["v"]
    return ("true" if value else "false") if isinstance(value, bool) else repr(value)


def _conflict(first: str, second: str, winner: str) -> str:
    import re

    return rf"given twice in .* with different values: {re.escape(first)} and {re.escape(second)}; {re.escape(winner)} would win"


@pytest.mark.parametrize(
    ("name", "table", "flat", "nested", "same"),
    [
        ("agent_id", "paif_config", '"zero"', '"one"', '"zero"'),
        ("checkpoint_on_exit", "paif_config.session_protocol", "false", "true", '"off"'),
        ("restore_on_start", "paif_config.session_protocol", "true", "false", "true"),
        ("checkpoint_interval_minutes", "paif_config.session_protocol", "10", "30", "10.0"),
        ("checkpoint_interval_minutes", "paif_config", "10", "30", "10"),
    ],
)
def test_a_setting_flat_and_in_paif_config_must_agree(
    tmp_path: Path, name: str, table: str, flat: str, nested: str, same: str
) -> None:
    # Seed 002's names may be written flat or in [paif_config]; the flat key used to win without
    # a word. The same value twice is fine; different values name both keys, both values, the winner.
    def toml(nested_value: str) -> str:
        return f"{name} = {flat}\n[{table}]\n{name} = {nested_value}\n"

    (tmp_path / "phoenix.toml").write_text(toml(same))
    assert load_config(str(tmp_path), env={}).sources[name].endswith("phoenix.toml")
    (tmp_path / "phoenix.toml").write_text(toml(nested))
    expected = _conflict(f"{table}.{name} = {_shown(nested)}", f"{name} = {_shown(flat)}", name)
    with pytest.raises(ConfigError, match=rf"setting {name} is {expected}"):
        load_config(str(tmp_path), env={})
    (tmp_path / "pyproject.toml").write_text(
        "[tool.phoenix]\n" + toml(nested).replace(f"[{table}]", f"[tool.phoenix.{table}]")
    )
    with pytest.raises(ConfigError, match=r"pyproject.toml \[tool.phoenix\] with different values"):
        load_config(None, project_root=str(tmp_path), env={})


@pytest.mark.parametrize(
    ("text", "first", "second"),
    [
        (
            "[paif_config]\ncheckpoint_on_exit = false\n[paif_config.session_protocol]\ncheckpoint_on_exit = true\n",
            "paif_config.checkpoint_on_exit = false",
            "paif_config.session_protocol.checkpoint_on_exit = true",
        ),
        ("ops-keep = 3\nops_keep = 4\n", "ops-keep = 3", "ops_keep = 4"),
        ("[paif_config]\nagent-id = 'a'\nagent_id = 'b'\n", "paif_config.agent-id = 'a'", "paif_config.agent_id = 'b'"),
    ],
)
def test_one_setting_written_two_ways_in_one_file_must_agree(
    tmp_path: Path, text: str, first: str, second: str
) -> None:
    (tmp_path / "phoenix.toml").write_text(text)
    with pytest.raises(ConfigError, match=_conflict(first, second, second.split(" = ", maxsplit=1)[0])):
        load_config(str(tmp_path), env={})

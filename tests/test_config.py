"""The one configuration mechanism: defaults < pyproject < phoenix.toml < env < arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from phoenix_protocol._config import SETTINGS, Config, load_config
from phoenix_protocol._errors import ConfigError


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


def test_a_large_finite_number_stands_for_no_limit(tmp_path: Path) -> None:
    from phoenix_protocol import Agent, Home

    (tmp_path / "phoenix.toml").write_text("recovery_retention_days = 36500\ncheckpoint_interval_minutes = 1e9\n")
    agent = Agent.open("cfg", home=Home(str(tmp_path)))
    agent.state.set_status("working", "t")
    assert agent.checkpoints.maybe_checkpoint() == []
    assert agent.checkpoints.create("recovery").checkpoint_type == "recovery"
    agent.checkpoints.flush()

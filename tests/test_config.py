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

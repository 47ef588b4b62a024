"""The Gemini CLI extension at the repository's root (``gemini-extension.json``, ``hooks/hooks.json``):
``gemini extensions install <this repository's URL>`` reads both from the root (Gemini CLI 0.61.0
has no subfolder option), ``gemini extensions link <checkout>`` from the folder given.

Its hooks are exactly the entries ``phx install gemini-cli`` writes into a project's shared
settings, name and command alike: Gemini CLI runs a hook whose name and command it already runs
for that event once (it deduplicates them), so the extension beside ``phx install gemini-cli``
never doubles an event, and beside the user-scope fast command the shared command stands aside.
The real CLI runs them in ``tests/e2e/test_gemini_cli.py``."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import jsonschema

import phoenix_protocol
from phoenix_protocol.integrations._clients import GEMINI_CLI
from phoenix_protocol.integrations._install import install_dir, install_hooks

ROOT = Path(__file__).parents[2]
SCHEMA = Path(__file__).parents[1] / "data" / "gemini-cli-settings.schema.json"


_PRE_RELEASES = {"a": "alpha", "b": "beta", "rc": "rc", "dev": "dev"}


def semver(version: str) -> str:
    """A PEP 440 version as semantic versioning, which Gemini CLI expects of an extension
    (``gemini extensions validate`` warns otherwise): ``0.2.0.dev0`` -> ``0.2.0-dev.0``."""
    match = re.fullmatch(r"(\d+\.\d+\.\d+)(?:\.?(a|b|rc|dev)(\d+))?", version)
    assert match, f"{version} has no semver form here: extend semver()"
    core, kind, number = match.groups()
    if kind is None:
        return core
    return f"{core}-{_PRE_RELEASES[kind]}.{number}"


def _read(name: str) -> dict[str, Any]:
    data = json.loads((ROOT / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_the_manifest_is_in_step_with_the_package() -> None:
    manifest = _read("gemini-extension.json")
    assert manifest["name"] == "phoenix-protocol"
    assert manifest["version"] == semver(phoenix_protocol.__version__)
    assert semver("1.4.2") == "1.4.2" and semver("1.5.0rc1") == "1.5.0-rc.1"
    assert manifest["description"]
    assert "hooks" not in manifest  # Gemini reads an extension's hooks from hooks/hooks.json only


def test_the_extensions_hooks_are_the_shared_settings_entries(tmp_path: Path) -> None:
    shared = install_hooks("gemini-cli", "project", project_dir=str(tmp_path), dry_run=True).settings["hooks"]
    assert _read("hooks/hooks.json") == {"hooks": shared}
    assert set(shared) == {native for native, _, _, _ in GEMINI_CLI.hooks}


def test_the_extension_names_nothing_of_this_machine() -> None:
    text = (ROOT / "hooks" / "hooks.json").read_text(encoding="utf-8")
    for local in (str(ROOT), sys.executable, install_dir(), "/home/", "/root/", "/tmp/"):
        assert local not in text
    for group in _read("hooks/hooks.json")["hooks"].values():
        for entry in group[0]["hooks"]:
            assert entry["command"].startswith("command -v phx >/dev/null 2>&1 || exit 0; exec phx hook ")
            assert entry["command"].endswith(" --client gemini-cli --shared")


def test_the_extensions_hooks_are_valid_gemini_settings_hooks() -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    validator = jsonschema.validators.validator_for(schema)
    validator(schema).validate(_read("hooks/hooks.json"))
    assert (ROOT / "hooks" / "hooks.json").read_text(encoding="utf-8").endswith("}\n")

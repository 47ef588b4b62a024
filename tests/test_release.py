"""One version (docs/releasing.md): ``_version.py`` is the source; the files Claude Code and
Gemini CLI read from this repository carry the same version, and the changelog has its section."""

from __future__ import annotations

import json
import re
from pathlib import Path

from phoenix_protocol import __version__

ROOT = Path(__file__).resolve().parents[1]


def _semver(version: str) -> str:
    """PEP 440's ``0.2.0.dev0`` / ``0.2.0rc1`` in semver's spelling (``0.2.0-dev.0``, ``0.2.0-rc.1``)."""
    match = re.fullmatch(r"(\d+\.\d+\.\d+)(?:\.?(dev|a|b|rc)(\d+))?", version)
    assert match, f"_version.py: {version!r} is not X.Y.Z with an optional .devN, aN, bN or rcN"
    release, kind, number = match.groups()
    return release if kind is None else f"{release}-{kind}.{number}"


def test_the_repository_files_carry_the_packages_version() -> None:
    plugin = json.loads((ROOT / "plugins" / "phoenix" / ".claude-plugin" / "plugin.json").read_text())
    marketplace = json.loads((ROOT / ".claude-plugin" / "marketplace.json").read_text())
    extension = json.loads((ROOT / "gemini-extension.json").read_text())
    assert plugin["version"] == __version__
    assert [p["version"] for p in marketplace["plugins"] if p["name"] == "phoenix"] == [__version__]
    assert extension["version"] == _semver(__version__)


def test_the_changelog_has_a_section_for_this_version() -> None:
    """A release's own section (``## X.Y.Z (YYYY-MM-DD)``), or the unreleased section of the
    version a ``.devN`` leads to (``## X.Y.Z (unreleased)``), first in the file."""
    release = re.match(r"\d+\.\d+\.\d+", __version__)
    assert release
    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(), flags=re.MULTILINE)
    expected = (
        rf"{re.escape(release.group())} \(unreleased\)"
        if __version__ != release.group()
        else rf"{re.escape(__version__)} \(\d{{4}}-\d{{2}}-\d{{2}}\)"
    )
    assert headings and re.fullmatch(expected, headings[0]), headings[:2]


def test_semver_spelling() -> None:
    assert _semver("0.2.0.dev0") == "0.2.0-dev.0"
    assert _semver("1.0.0rc2") == "1.0.0-rc.2"
    assert _semver("1.2.3") == "1.2.3"

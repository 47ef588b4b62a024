"""``phx ui`` in a real headless browser (issue 35): Debian's Chromium driven by Playwright, against
a real uvicorn on loopback serving a home filled by ``ui_scenario`` (two agents, one stalled; a team
with a silent teammate and a blocked task; a Clinic episode).

Each view shows what it must, live updates arrive without a reload, the keyboard moves around, a
phone-sized screen needs no sideways scrolling, and a read-only token changes nothing. Screenshots
of each view go to a temporary folder, or to ``$UI_SCREENSHOTS`` (``docs/ui`` holds the
ones ``docs/ui.md`` shows, taken by this test with ``UI_SCREENSHOTS=docs/ui``).

Playwright's own browser download cannot run here: it drives the system's ``/usr/bin/chromium``,
installed from Debian's packages when missing (as root); skipped with the reason only when that
cannot be done.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "server"))

from test_server_uvicorn import running
from ui_scenario import CLAUDE_TEAM, Scenario, fill

from phoenix_protocol.core._home import Home
from phoenix_protocol.server._app import create_app
from phoenix_protocol.services._agent import Agent
from phoenix_protocol.store._teams import Team
from phoenix_protocol.store._tokens import TokenStore

pytestmark = pytest.mark.e2e
CHROMIUM = "/usr/bin/chromium"
WAIT_MS = 15_000


def _chromium() -> str:
    found = shutil.which("chromium") or (CHROMIUM if os.path.exists(CHROMIUM) else None)
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("Chromium is not installed and cannot be (not root, or no apt-get): apt-get install chromium")
    done = subprocess.run(
        ["apt-get", "install", "-y", "-q", "chromium"],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
    if done.returncode != 0 or not os.path.exists(CHROMIUM):
        pytest.skip(f"Chromium could not be installed from Debian's packages: {done.stderr.strip()[-300:]}")
    return CHROMIUM


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    executable = _chromium()
    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=executable, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    where = os.environ.get("UI_SCREENSHOTS")
    folder = Path(where) if where else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def served(home: Home) -> Iterator[tuple[Scenario, str, str, str]]:
    scenario = fill(home)
    tokens = TokenStore(home)
    reader, _ = tokens.create(["*"], ["checkpoint:read", "team:read"], label="viewer")
    writer, _ = tokens.create(["*"], ["*"], label="operator")
    try:
        with running(create_app(home, clock=scenario.clock)) as url:
            yield scenario, url, reader, writer
    finally:
        scenario.close()


def _open(browser: Any, url: str, token: str, *, width: int = 1280, height: int = 900) -> Any:
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(WAIT_MS)
    page.goto(f"{url}/ui/#token={token}")
    page.wait_for_selector("#live.on")
    return page


def test_every_view_shows_what_it_must(browser: Any, served: tuple[Scenario, str, str, str], shots: Path) -> None:
    _scenario, url, reader, _writer = served
    page = _open(browser, url, reader)
    # Agents: who is alive, who is stalled and why.
    builder = page.locator("tr[data-agent=builder]")
    assert builder.locator(".badge").inner_text() == "alive"
    scout = page.locator("tr[data-agent=scout]")
    assert scout.locator(".badge").inner_text() == "stalled"
    assert "is gone" in scout.inner_text()
    assert "scout is stalled" in page.locator("[role=alert]").first.inner_text()
    assert page.locator("[data-team=release]").count() == 1
    assert "1 episode(s): 1 healed" in page.locator("main").inner_text()
    assert page.locator("#mode").inner_text() == "read-only"
    page.screenshot(path=str(shots / "overview.png"), full_page=True)

    # An agent: the brief rendered, the timeline with its drift mark, checkpoints, sessions.
    builder.locator("a").click()
    page.wait_for_selector("article.brief h1")
    assert "Port the parser to the new grammar" in page.locator("article.brief").inner_text()
    assert page.locator("svg.chart .mark-drift").count() == 1
    assert "2 failures" in (page.locator("svg.chart").get_attribute("aria-label") or "")
    assert page.locator("table[aria-label=Checkpoints] tbody tr").count() == 2
    assert "sess-builder" in page.locator("table[aria-label=Sessions]").inner_text()
    assert page.locator("#take-checkpoint").count() == 0  # read-only: no action offered
    page.screenshot(path=str(shots / "agent.png"), full_page=True)
    page.locator("#compare").click()
    page.wait_for_selector("pre.diff")
    assert page.locator("pre.diff .add").count() > 0 and "test_grammar" in page.locator("pre.diff").inner_text()
    page.screenshot(path=str(shots / "diff.png"), full_page=True)
    page.go_back()
    page.wait_for_selector("article.brief")
    page.locator("table[aria-label=Checkpoints] a").first.click()
    page.wait_for_selector("pre[data-checkpoint]")
    assert "grammar tests next" in page.locator("pre[data-checkpoint]").inner_text()

    # The team: board, dependency graph, roster, mailbox with delivery and ack state.
    page.goto(f"{url}/ui/#/team/release")
    page.wait_for_selector("[data-column=blocked] .task")
    assert "Publish the release" in page.locator("[data-column=blocked]").inner_text()
    assert "Write the release notes" in page.locator("[data-column=in_progress]").inner_text()
    assert "Cut the release branch" in page.locator("[data-column=done]").inner_text()
    assert page.locator("svg.graph path:not(marker path)").count() == 2
    assert page.locator("tr[data-mate=bob] .badge").inner_text() == "stale"
    assert page.locator("tr[data-mate=alice] .badge").inner_text() == "online"
    publishing = page.locator("section[aria-label='Thread Publishing']")
    assert "not delivered" in publishing.inner_text()
    assert "acked" in page.locator("section[aria-label='Thread Notes format']").inner_text()
    page.screenshot(path=str(shots / "team.png"), full_page=True)

    # A Claude Code agent team whose lead died: the roster with the spawn prompt, the task's owner,
    # the lost reply waiting to be delivered again.
    page.goto(f"{url}/ui/#/")
    page.locator(f"[data-claude-team={CLAUDE_TEAM}] a").click()
    page.wait_for_selector("[data-cc-msg=m2]")
    assert "Find every caller of parse()" in page.locator("tr[data-member=researcher]").inner_text()
    assert "researcher" in page.locator("tr[data-cc-task='1']").inner_text()
    assert "to be delivered again to team-lead" in page.locator("[data-cc-msg=m2]").inner_text()
    page.screenshot(path=str(shots / "claude-team.png"), full_page=True)

    # The Clinic: each visit's diagnosis, prescription and outcome.
    page.goto(f"{url}/ui/#/clinic")
    page.wait_for_selector("[data-episode]")
    text = page.locator("[data-episode]").inner_text()
    for expected in ("healed", "transient_error", "retry_with_backoff", "hallucinated_tool", "modify_prompt"):
        assert expected in text
    page.screenshot(path=str(shots / "clinic.png"), full_page=True)
    page.close()


def test_live_updates_arrive_without_a_reload(browser: Any, served: tuple[Scenario, str, str, str]) -> None:
    scenario, url, reader, _writer = served
    page = _open(browser, url, reader)
    page.goto(f"{url}/ui/#/team/release")
    page.wait_for_selector("[data-seq]")
    page.wait_for_selector("#live.on")
    page.evaluate("window.__sameDocument = true")
    Team.open(scenario.home, "release").send("bob", "lead", subject="Credentials", body="Ready for upload.")
    page.wait_for_selector("section[aria-label='Thread Credentials']")
    # An agent's status, written by its hooks elsewhere, shows on the overview too.
    page.goto(f"{url}/ui/#/")
    page.wait_for_selector("tr[data-agent=scout]")
    Agent("scout", scenario.home).state.set_status("idle", "Survey done", source="hook")
    page.wait_for_selector("tr[data-agent=scout] .badge:text-is('idle')")  # (the page's CSP forbids eval)
    assert page.evaluate("window.__sameDocument") is True
    page.close()


def test_a_read_only_token_cannot_change_anything(browser: Any, served: tuple[Scenario, str, str, str]) -> None:
    scenario, url, reader, writer = served
    builder = Agent("builder", scenario.home)
    before = len(builder.checkpoints.entries())
    page = _open(browser, url, reader)
    statuses = page.evaluate(
        """async (token) => {
            const h = { Authorization: `Bearer ${token}` };
            const out = [];
            for (const path of ["api/agents/builder/checkpoint", "api/teams/release/checkpoint"]) {
              out.push((await fetch(path, { method: "POST", headers: h })).status);
            }
            for (const path of ["/checkpoint/builder", "/memory/builder"]) {  // the bridge's own routes
              out.push((await fetch(path, { method: "POST", headers: { ...h, "Content-Type": "application/json" },
                                            body: JSON.stringify({ content: "x" }) })).status);
            }
            return out;
        }""",
        reader,
    )
    assert statuses[:2] == [409, 409] and all(s in (404, 409) for s in statuses[2:]), statuses
    assert len(builder.checkpoints.entries()) == before
    page.close()
    # With the write scope, the page offers the action and it works.
    page = _open(browser, url, writer)
    assert page.locator("#mode").inner_text() == "read-write"
    page.goto(f"{url}/ui/#/agent/builder")
    page.locator("#take-checkpoint").click()
    page.wait_for_selector(f"table[aria-label=Checkpoints] tbody tr:nth-child({before + 1})")
    assert len(builder.checkpoints.entries()) == before + 1
    page.close()


def test_keyboard_and_a_phone_screen(browser: Any, served: tuple[Scenario, str, str, str], shots: Path) -> None:
    _scenario, url, reader, _writer = served
    page = _open(browser, url, reader)
    page.keyboard.press("3")
    page.wait_for_selector("[data-episode]")
    page.keyboard.press("1")
    page.wait_for_selector("tr[data-agent]")
    page.keyboard.press("j")
    assert page.evaluate("document.activeElement.dataset.agent") == "builder"
    page.keyboard.press("j")
    assert page.evaluate("document.activeElement.dataset.agent") == "scout"
    page.keyboard.press("Enter")
    page.wait_for_selector("article.brief, main h1:has-text('Agent scout')")
    assert "Agent scout" in page.locator("main h1").inner_text()
    # Tab reaches the skip link first, then the sections.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip"
    page.close()
    phone = _open(browser, url, reader, width=390, height=844)
    assert phone.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    phone.screenshot(path=str(shots / "phone.png"), full_page=True)
    phone.goto(f"{url}/ui/#/team/release")
    phone.wait_for_selector("[data-column=blocked] .task")
    assert phone.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    phone.close()

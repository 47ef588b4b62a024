"""The hot path's screen (``core._screen``) against the redactor's labelled corpus: whatever the
redactor finds, the screen masks; ordinary commands and paths come through as they were."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import phoenix_protocol
from phoenix_protocol.core._redact import find_secrets, redact
from phoenix_protocol.core._screen import MASK, screen
from secrets_corpus import leaked, load_negatives, load_positives

POSITIVES = load_positives()
NEGATIVES = load_negatives()


@pytest.mark.parametrize(
    ("kind", "line", "secrets"), POSITIVES, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(POSITIVES)]
)
def test_no_secret_of_the_corpus_survives_the_screen(kind: str, line: str, secrets: list[str]) -> None:
    out = screen(line)
    caught = [s for s in secrets if not leaked(s, redact(line))]  # what the redactor itself catches
    for secret in caught:
        assert not leaked(secret, out), f"{kind}: {secret!r} survives the screen: {out!r}"
    assert not find_secrets(out), f"{kind}: the redactor still finds something in {out!r}"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["git", "push", "-u", "origin", "main", "--token", "=", "is", "curl", "-H", "x:y"])),
    st.sampled_from(POSITIVES),
    st.lists(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-./=:'\" ", max_size=12), max_size=4),
)
def test_a_secret_among_other_words_never_survives(
    before: list[str], row: tuple[str, str, list[str]], after: list[str]
) -> None:
    text = " ".join([*before, row[1], *after])
    out = screen(text)
    assert not find_secrets(out), out
    for secret in row[2]:
        if not leaked(secret, redact(text)):
            assert not leaked(secret, out), out


@pytest.mark.parametrize(
    "command",
    [
        "pytest -q tests/test_auth.py -k case_12",
        "pytest tests/test_auth.py::test_login_rejects_expired_token -x",
        'git commit -m "Add the migration for the users table"',
        "npm run build -- --watch",
        "python -m phoenix_protocol.cli --help",
        "ls -la src/phoenix_protocol/integrations",
        "src/phoenix_protocol/core/_redact.py",
        "cat docs/recovery.md | head -40",
        "make test",
        "docker compose up -d postgres",
        "git show 3f2a9c1e5b7d4a6f8e0c2b4d6f8a0c2e4b6d8f0a",  # lower-case hex is no token format
        "curl -s http://127.0.0.1:8080/sessions/0b6f3c1e-7a2d-4e95-8c41-2f9d6a0b7e53",
    ],
)
def test_ordinary_commands_and_paths_come_through(command: str) -> None:
    assert screen(command) == command


@pytest.mark.parametrize(
    ("command", "kept", "masked"),
    [
        ("export API_KEY=abc123def456 && make", ["export", "&&", "make"], ["abc123def456"]),
        ("curl -H 'Authorization: Bearer abcdefghijklmnopqrstu' https://x.example", ["curl", "-H"], ["abcdefghij"]),
        ("mysql -u root -phunter22 app", ["mysql", "app"], ["hunter22"]),
        ("deploy --token hunter2 --verbose", ["deploy", "--token", "--verbose"], ["hunter2"]),
        ("echo the password is swordfish", ["echo", "the", "password", "is"], ["swordfish"]),
        ("psql postgres://app:s3cret@db/x", ["psql"], ["s3cret"]),
        ("git push https://ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5b@github.com/x", ["git", "push"], ["ghp_aB3d"]),
    ],
)
def test_what_may_hold_a_secret_is_masked(command: str, kept: list[str], masked: list[str]) -> None:
    out = screen(command)
    assert MASK in out
    for word in kept:
        assert word in out.split(), out
    for piece in masked:
        assert piece not in out, out


def test_most_ordinary_lines_are_kept() -> None:
    """The screen over-masks by design, but not so much that the brief says nothing: most of the
    corpus's ordinary lines keep every word (what it masks there is mostly code that names a
    secret, ``password = None``, and base64 data; 251 of 365 lines were kept on 2026-11-27)."""
    kept = sum(screen(line) == " ".join(line.split()) for line in NEGATIVES)
    assert kept / len(NEGATIVES) >= 0.65, f"{kept} of {len(NEGATIVES)} ordinary lines kept whole"


def test_the_screen_imports_nothing() -> None:
    code = (
        "import sys; before = set(sys.modules); from phoenix_protocol.core._screen import screen; "
        "screen('export TOKEN=abc git push'); print(*sorted(set(sys.modules) - before))"
    )
    # -S as the installed hook runs, with Phoenix's directory on the path as its command puts it.
    where = os.path.dirname(os.path.dirname(phoenix_protocol.__file__))
    env = {**os.environ, "PYTHONPATH": where}
    loaded = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True, env=env)
    package = {"__future__", "phoenix_protocol", "phoenix_protocol._version", "phoenix_protocol.core"}
    assert set(loaded.stdout.split()) <= package | {"phoenix_protocol.core._screen"}, loaded.stdout

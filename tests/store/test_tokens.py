"""Bearer tokens: plaintext once, stored hashed, constant-time verified, scoped, revocable,
expiring; in the home's database (``phx_tokens``), on both engines (the ``backend`` fixture sets
``PHOENIX_STORE`` for PostgreSQL, so the CLI uses the same store)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from typing import Any

import pytest

from phoenix_protocol.cli._main import cli
from phoenix_protocol.core._clock import ManualClock, ms_from_iso
from phoenix_protocol.core._errors import UsageError
from phoenix_protocol.core._home import Home
from phoenix_protocol.store import _db
from phoenix_protocol.store._tokens import (
    SCOPES,
    TokenStore,
    agent_namespace,
    insert_records,
    parse_duration,
    record_json,
    row_keys,
    team_namespace,
)


@pytest.fixture
def store(backend: str, home: Home, clock: ManualClock) -> Iterator[TokenStore]:
    yield TokenStore(home, clock=clock)
    _db.close_all()


def _db_file(home: Home) -> str:
    return os.path.join(home.root, "phoenix.db")


def stored_rows(store: TokenStore) -> list[tuple[str, str]]:
    """``(id, record)`` of every row, as stored."""
    rows = store.db.read(lambda tx: tx.all("SELECT id, record FROM phx_tokens ORDER BY position"))
    return [(str(k), str(r)) for k, r in rows]


def stored_text(store: TokenStore) -> str:
    """Everything kept: the rows, and on SQLite the database file and its WAL as bytes."""
    text = repr(stored_rows(store))
    if store.db.engine == "sqlite":
        for path in (store.db.where, store.db.where + "-wal"):
            if os.path.exists(path):
                with open(path, "rb") as fh:
                    text += fh.read().decode("latin-1")
    return text


def test_token_is_shown_once_and_stored_hashed(store: TokenStore, home: Home) -> None:
    token, info = store.create(["agent:zero"], ["memory:read"], label="ci")
    prefix, token_id, secret = token.split("_", 2)
    assert prefix == "phx" and token_id == info.id and len(token_id) == 12
    assert len(secret) >= 43  # 32 random bytes, url-safe base64
    raw = stored_text(store)
    assert secret not in raw and token not in raw
    assert '"hash"' in raw and info.id in raw
    if store.db.engine == "sqlite":
        assert stat.S_IMODE(os.stat(store.db.where).st_mode) == 0o600
    else:
        assert not os.path.exists(_db_file(home))  # on the server, where the rest of the store is
    assert not os.path.exists(os.path.join(home.root, "tokens.json"))
    assert "hash" not in info.as_dict()
    assert store.verify(token) is not None


def test_a_label_is_redacted(store: TokenStore) -> None:
    secret = "ghp_" + "Zx9" * 12
    _token, info = store.create(["agent:zero"], ["*"], label=f"bot {secret}")
    assert info.label is not None and secret not in info.label and "REDACTED" in info.label
    assert secret not in stored_text(store) and secret not in repr([i.as_dict() for i in store.list()])


def test_verify_refuses_every_bad_token_alike(store: TokenStore, clock: ManualClock) -> None:
    token, info = store.create(["agent:zero"], ["*"], expires_in=60)
    other, other_info = store.create(["agent:zero"], ["*"])
    assert store.verify(token) is not None
    wrong = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    for bad in (
        wrong,
        "phx_000000000000_" + token.split("_", 2)[2],
        "not-a-token",
        "",
        "phx_",
        "phx_zz_x",
        token + "x",
    ):
        assert store.verify(bad) is None, bad
    clock.advance(61)
    assert store.verify(token) is None  # expired
    assert store.verify(other) is not None
    store.revoke(other_info.id)
    assert store.verify(other) is None  # revoked
    assert {i.id: i.status(clock.now_ms()) for i in store.list()} == {info.id: "expired", other_info.id: "revoked"}


def test_revocation_reaches_another_process_view(backend: str, home: Home, clock: ManualClock) -> None:
    server_view = TokenStore(home, clock=clock)
    cli_view = TokenStore(home, clock=clock)
    token, info = cli_view.create(["team:t1"], ["team:read"])
    assert server_view.verify(token) is not None  # cached from now on
    cli_view.revoke(info.id)
    assert server_view.verify(token) is None


def test_scopes_and_namespaces(store: TokenStore) -> None:
    _token, info = store.create([agent_namespace("zero"), team_namespace("t1")], ["memory:*", "team:read"])
    assert info.covers_namespace("agent:zero") and info.covers_namespace("team:t1")
    assert not info.covers_namespace("agent:one") and not info.covers_namespace("team:zero")
    assert info.allows("memory:read") and info.allows("memory:write") and info.allows("team:read")
    assert not info.allows("team:write") and not info.allows("checkpoint:read")
    _token, everything = store.create(["*"], ["*"])
    assert everything.covers_namespace("agent:anyone") and all(everything.allows(s) for s in SCOPES)


@pytest.mark.parametrize(
    ("namespaces", "scopes"),
    [
        ([], ["*"]),
        (["zero"], ["*"]),
        (["agent:../x"], ["*"]),
        (["user:zero"], ["*"]),
        (["agent:zero"], []),
        (["agent:zero"], ["memory:delete"]),
        (["agent:zero"], ["files:*"]),
    ],
)
def test_bad_requests_are_refused_and_write_nothing(
    store: TokenStore, namespaces: list[str], scopes: list[str]
) -> None:
    with pytest.raises(UsageError):
        store.create(namespaces, scopes)
    assert not os.path.exists(_db_file(store.home)) and store.list() == []


def test_configured_survives_revoking_the_last_token(store: TokenStore) -> None:
    assert not store.configured() and not store.has_active()
    _token, info = store.create(["agent:zero"], ["*"])
    store.revoke(info.id)
    store.revoke(info.id)  # idempotent
    assert store.configured() and not store.has_active()
    with pytest.raises(UsageError):
        store.revoke("000000000000")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("3600", 3600), ("90s", 90), ("45m", 2700), ("12h", 43200), ("30d", 2_592_000), ("2w", 1_209_600)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5", "10y", "1.5.2h", "soon"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(UsageError):
        parse_duration(text)


HUNDRED_YEARS = 36_525 * 86_400  # the longest lifetime a token can have


@pytest.mark.parametrize("text", ["99999999d", "36526d", "5300w", "9" * 400])
def test_parse_duration_refuses_more_than_100_years(text: str) -> None:
    with pytest.raises(UsageError, match="at most 100 years"):
        parse_duration(text)
    assert parse_duration("36525d") == HUNDRED_YEARS


@pytest.mark.parametrize("expires_in", [HUNDRED_YEARS + 1, 99_999_999 * 86_400.0, float("inf"), float("nan")])
def test_create_refuses_a_lifetime_past_the_bound_and_writes_nothing(store: TokenStore, expires_in: float) -> None:
    with pytest.raises(UsageError):
        store.create(["agent:zero"], ["*"], expires_in=expires_in)
    assert not os.path.exists(_db_file(store.home)) and store.list() == []


def test_longest_lifetime_has_an_iso_8601_expiry(store: TokenStore, clock: ManualClock) -> None:
    _token, info = store.create(["agent:zero"], ["*"], expires_in=HUNDRED_YEARS)
    expires_at = info.as_dict()["expires_at"]
    assert ms_from_iso(expires_at) == clock.now_ms() + int(HUNDRED_YEARS * 1000)
    assert len(expires_at.split("-", 1)[0]) == 4


def test_cli_create_list_revoke(backend: str, home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        cli(["token", "create", "--agent", "zero", "--scope", "memory:read", "--expires", "30d", "--home", home.root])
        == 0
    )
    lines = capsys.readouterr().out.strip().splitlines()
    token = lines[-1]
    assert token.startswith("phx_")
    assert TokenStore(home).verify(token) is not None

    assert cli(["token", "create", "--team", "t1", "--label", "bridge", "--json", "--home", home.root]) == 0
    created = json.loads(capsys.readouterr().out)
    assert created["token"].startswith("phx_") and created["info"]["namespaces"] == ["team:t1"]
    assert created["info"]["scopes"] == ["*"]

    assert cli(["token", "list", "--json", "--home", home.root]) == 0
    listed = capsys.readouterr().out
    assert token.split("_", 2)[2] not in listed and created["token"] not in listed
    assert [t["status"] for t in json.loads(listed)["tokens"]] == ["active", "active"]

    assert cli(["token", "revoke", created["info"]["id"], "--home", home.root]) == 0
    capsys.readouterr()
    assert TokenStore(home).verify(created["token"]) is None
    assert cli(["token", "list", "--home", home.root]) == 0
    assert "revoked" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args",
    [
        ["token", "create"],
        ["token", "create", "--agent", "../etc"],
        ["token", "create", "--agent", "zero", "--scope", "root"],
        ["token", "create", "--agent", "zero", "--expires", "0"],
        ["token", "create", "--agent", "zero", "--expires", "99999999d"],
        ["token", "create", "--agent", "zero", "--expires", "99999999d", "--json"],
        ["token", "revoke", "abc"],
    ],
)
def test_cli_usage_errors_exit_2(backend: str, home: Home, args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli([*args, "--home", home.root]) == 2
    captured = capsys.readouterr()
    if "--json" in args:
        assert json.loads(captured.out)["error"]["exit_code"] == 2
    else:
        assert "error" in captured.err
    assert not os.path.exists(os.path.join(home.root, "tokens.json")) and not os.path.exists(_db_file(home))
    assert TokenStore(home).list() == []


# -- records stored by hand or by an older version: checked on read ----------------------------

YEAR_275817_MS = 8_640_000_000_000_000  # what `--expires 99999999d` stored before the 100-year bound


def _tamper(store: TokenStore, position: int, **fields: object) -> None:
    """Change fields of the stored record at ``position`` (0-based), as a hand edit would."""
    key, text = stored_rows(store)[position]
    record = {**json.loads(text), **fields}
    store.db.transaction(
        lambda tx: tx.execute("UPDATE phx_tokens SET record = ? WHERE id = ?", (json.dumps(record), key))
    )


def _plant(store: TokenStore, records: list[Any]) -> None:
    """Append records as an earlier release's hand-edited tokens.json would have held them."""

    def work(tx: Any) -> None:
        taken = {k for (k,) in tx.all("SELECT id FROM phx_tokens")}
        insert_records(tx, records, row_keys(records, taken))

    store.db.transaction(work)


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"expires_ms": YEAR_275817_MS}, "at most 100 years"),
        ({"expires_ms": "never"}, "expires_ms 'never'"),
        ({"expires_ms": 1.5e12}, "expires_ms 1500000000000.0"),
        ({"expires_ms": True}, "expires_ms True"),
        ({"created_ms": "yesterday"}, "created_ms 'yesterday'"),
        ({"revoked_ms": "no"}, "revoked_ms 'no'"),
        ({"namespaces": "agent:zero"}, "namespaces 'agent:zero'"),
        ({"namespaces": ["agent:../etc"]}, "namespaces"),
        ({"scopes": ["root"]}, "scopes"),
        ({"scopes": []}, "scopes [] is not a non-empty list"),
        ({"label": 7}, "label 7"),
        ({"hash": None}, "hash"),
    ],
)
def test_a_bad_stored_record_is_invalid_and_never_authenticates(
    store: TokenStore, clock: ManualClock, fields: dict[str, object], said: str
) -> None:
    token, info = store.create(["agent:zero"], ["*"], expires_in=3600)
    good, good_info = store.create(["agent:zero"], ["*"])
    _tamper(store, 0, **fields)
    stored = stored_rows(store)
    reader = TokenStore(store.home, clock=clock)  # a server's view
    assert reader.verify(token) is None  # the secret matches, but the record is not one Phoenix wrote
    assert reader.verify(good) is not None
    listed = {i.id: i for i in reader.list()}
    assert listed[info.id].status(clock.now_ms()) == "invalid" and not listed[info.id].active(clock.now_ms())
    problem = listed[info.id].problem
    assert problem is not None and said in problem and info.id in problem and store.where in problem
    assert listed[info.id].as_dict(clock.now_ms())["problem"] == problem  # as_dict never fails on it
    assert listed[good_info.id].status(clock.now_ms()) == "active" and listed[good_info.id].problem is None
    assert reader.problems() == [problem]
    assert reader.configured() and reader.has_active()
    assert stored_rows(store) == stored  # reading never rewrites a record


def test_an_absurd_expiry_is_listed_as_invalid_by_the_cli(
    backend: str, home: Home, clock: ManualClock, capsys: pytest.CaptureFixture[str]
) -> None:
    store = TokenStore(home, clock=clock)
    token, info = store.create(["agent:zero"], ["*"], expires_in=3600)
    _tamper(store, 0, expires_ms=YEAR_275817_MS)
    assert TokenStore(home).verify(token) is None
    assert not TokenStore(home).has_active()  # so `phx serve --host 0.0.0.0` stays refused
    assert TokenStore(home).configured()  # and authentication stays on
    assert cli(["token", "list", "--json", "--home", home.root]) == 0
    (listed,) = json.loads(capsys.readouterr().out)["tokens"]
    assert listed["id"] == info.id and listed["status"] == "invalid"
    assert listed["expires_at"] is None and "at most 100 years" in listed["problem"]
    assert cli(["token", "list", "--home", home.root]) == 0
    out = capsys.readouterr().out
    assert info.id in out and "invalid" in out and "275817" not in out


def test_bad_records_are_kept_by_create_and_revoke(store: TokenStore, clock: ManualClock) -> None:
    """Never silently dropped: a record that is not an object, or a repeated id, is listed as
    invalid, and writing the file (create, revoke) keeps every record as it was."""
    token, info = store.create(["agent:zero"], ["*"])
    first = json.loads(stored_rows(store)[0][1])
    planted = {**first, "hash": "0" * 64, "label": "a second record under the same id"}
    _plant(store, [42, planted, {"id": "not-hex", "expires_ms": "soon"}])
    before = stored_rows(store)
    statuses = [(i.id, i.status(clock.now_ms())) for i in store.list()]
    assert statuses == [(info.id, "active"), ("record 2", "invalid"), (info.id, "invalid"), ("record 4", "invalid")]
    problems = store.problems()
    assert "record 2 is not an object" in problems[0] and "repeats the id" in problems[1]
    assert "'not-hex'" in problems[2] and "expires_ms 'soon'" in problems[2]
    assert store.verify(token) is not None  # the first record with the id is the one that counts

    _token, other = store.create(["team:t1"], ["team:read"])
    store.revoke("not-hex")  # an invalid record can be revoked by its stored id
    after = stored_rows(store)
    kept = [json.loads(text) for _key, text in after]
    assert after[:3] == before[:3] and kept[3]["id"] == "not-hex" and kept[3]["expires_ms"] == "soon"
    assert kept[3]["revoked_ms"] == clock.now_ms() and kept[4]["id"] == other.id
    assert kept[2] == planted and record_json(kept[2]) == before[2][1]  # kept as it was


def test_cli_list_text_shows_why_a_record_is_invalid(
    backend: str, home: Home, clock: ManualClock, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The text table says why a token is invalid (its ``problem``, as ``--json`` has it), and an
    expiry that is invalid is not shown as "never"; a sound token keeps its "never"."""
    monkeypatch.setenv("COLUMNS", "400")
    store = TokenStore(home, clock=clock)
    _token, info = store.create(["agent:zero"], ["*"], expires_in=3600)
    _never, sound = store.create(["agent:one"], ["*"])
    _tamper(store, 0, expires_ms=YEAR_275817_MS)
    assert cli(["token", "list", "--home", home.root]) == 0
    lines = capsys.readouterr().out.splitlines()
    (bad_row,) = [line for line in lines if line.split()[:1] == [info.id]]
    (good_row,) = [line for line in lines if line.split()[:1] == [sound.id]]
    assert "invalid" in bad_row and "never" not in bad_row and "275817" not in bad_row
    assert "active" in good_row and "never" in good_row
    (note,) = [line for line in lines if "at most 100 years" in line]
    (problem,) = TokenStore(home).problems()
    assert note == f"invalid {info.id}: {problem}"


def test_cli_list_text_keeps_never_for_an_invalid_record_whose_expiry_is_sound(
    backend: str, home: Home, clock: ManualClock, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record invalid for another reason (its scopes) and without an expiry shows "never":
    only an expiry that does not read is shown as "-"."""
    monkeypatch.setenv("COLUMNS", "400")
    store = TokenStore(home, clock=clock)
    _token, info = store.create(["agent:zero"], ["*"])
    _tamper(store, 0, scopes="everything")
    [listed] = store.list()
    assert listed.problem is not None and "scopes" in listed.problem and listed.expiry_known
    assert cli(["token", "list", "--home", home.root]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.split()[:1] == [info.id]]
    assert "invalid" in row and "never" in row and " - " not in row


def test_tokens_created_at_once_are_all_kept(store: TokenStore, home: Home) -> None:
    """Eight writers creating tokens together (threads: one connection each): none is lost, every
    one verifies, and two listings agree on the order."""
    import threading

    made: list[str] = []
    errors: list[BaseException] = []

    def create(n: int) -> None:
        try:
            made.append(TokenStore(home).create([f"agent:a{n}"], ["*"])[0])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(made) == 8
    assert all(store.verify(token) is not None for token in made)
    assert [i.id for i in store.list()] == [i.id for i in TokenStore(home).list()]
    assert sorted(i.id for i in store.list()) == sorted(t.split("_")[1] for t in made)

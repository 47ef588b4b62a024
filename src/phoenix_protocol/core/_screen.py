"""A first pass over short text bound for ``state.json`` on the hook's hot path, without ``re``.

The PostToolUse hook records what the agent did (the command a Bash call ran, the file a Write
wrote) on every tool call, where the secret redactor (``_redact``: importing ``re`` and the rule
set costs 5-10 ms, more than the heartbeat's whole budget) cannot run. ``screen`` masks every
whitespace-separated word that *could* hold something the redactor would redact, and keeps the
others as they are; it over-masks by design (a word masked for nothing costs the brief a
detail, a word kept wrongly would put a secret into a file). What it masks, and why:

- a word with a long run of letters, digits, ``_`` and ``-`` (14 or more) that has a digit, a
  capital letter, or one of the lower-case prefixes of a provider's token (``gh``, ``sk``,
  ``xox``, ...): every token format the redactor knows is one (an identifier such as
  ``test_login_rejects_expired_token`` is kept);
- a word with a marker of a token format whose body may hold ``.``, ``/``, ``+``, ``~`` or
  ``=`` (``whsec_``, ``eyJ``, ``ya29.``, ``sig=``, ...) and 14 characters or more;
- an assignment to a secret-named key inside the word (``API_KEY=...``, ``"password":...``),
  a URL with a user and password (``scheme://user:pass@host``), a secret-named XML tag, a
  ``-u=``/``--user=`` credential, ``mysql -pPASSWORD``;
- the value *after* a word that ends in a secret word (``--token VALUE``, ``Bearer VALUE``,
  ``password is VALUE``, ``export TOKEN = VALUE``, ``-u user:pass``), over connecting words
  (``is``, ``was``, ``=``, ``:``).

The brief still passes everything through the redactor when it is rendered (off the hot path).
``tests/core/test_screen.py`` checks the screen against the redactor's labelled corpus: no secret
the redactor finds survives it.
"""

from __future__ import annotations

__all__ = ["MASK", "screen"]

MASK = "[…]"

_RUN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_DIGITS = frozenset("0123456789")
_UPPER = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_HEX = frozenset("0123456789abcdef-")
_LONG_RUN = 14
# Prefixes of token formats whose body may be all lower-case letters (at the start of a run, or
# after its ``_`` or ``-``: every such format has a look-behind for a letter or digit).
_PREFIXES = (
    "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "gldt-", "glrt-", "glptt-", "glsoat-",
    "glft-", "glimt-", "glagent-", "gloas-", "glffct-", "xox", "xapp-", "sk_", "rk_", "whsec_", "sk-",
    "npm_", "hf_", "api_org_", "gsk_", "r8_", "xai-", "pplx-", "key-", "dapi", "shpat_", "shpca_",
    "shppa_", "shpss_", "lin_api_", "secret_", "glsa_", "glc_", "sntr", "sbp_", "ntn_",
)  # fmt: skip
# Markers of token formats with ``.``, ``/``, ``+``, ``~``, ``%`` or ``=`` in them, which break runs.
_MARKERS = (
    "whsec_", "glc_", "sntr", "1//0", "ya29.", "hvs.", "hvb.", "hvr.", "dp.", "sg.", "eyj", "q~", "sig=",
    "hooks.slack.com", "discord", "accountkey", "sharedaccesskey",
)  # fmt: skip
# What a key ends in when it names a secret (the redactor's assignments).
_KEY_WORDS = (
    "pass", "passwd", "password", "passphrase", "pwd", "secret", "token", "key", "apikey", "credential",
    "credentials", "auth",
)  # fmt: skip
# ``--<...>word VALUE``
_FLAG_WORDS = ("password", "passwd", "token", "secret", "apikey", "api-key", "access-key", "secret-key")
# ``word is VALUE``
_PROSE_WORDS = ("password", "passwd", "passphrase", "code", "pin", "token", "key", "secret")
_QUOTES = "\"'`"
_OPS = ":="


def _long_run(word: str) -> bool:
    """Whether ``word`` holds a run that may be a provider's token (see the module docstring)."""
    start = -1
    for i, ch in enumerate(word + " "):
        if ch in _RUN:
            if start < 0:
                start = i
            continue
        if start >= 0 and i - start >= _LONG_RUN:
            run = word[start:i]
            chars = set(run)
            if chars <= _HEX:
                pass  # a digest, a git SHA, a UUID: no token format is lower-case hex alone
            elif chars & _DIGITS or chars & _UPPER:
                return True
            else:
                low = run.lower()
                for prefix in _PREFIXES:
                    at = low.find(prefix)
                    while at >= 0:
                        if at == 0 or low[at - 1] in "_-":
                            return True
                        at = low.find(prefix, at + 1)
        start = -1
    return False


def _assignment(low: str) -> bool:
    """Whether a key word in ``low`` is followed by an operator and a value (``api_key=x``)."""
    for word in _KEY_WORDS:
        at = low.find(word)
        while at >= 0:
            after = at + len(word)
            if after < len(low) and low[after] in _QUOTES:
                after += 1
            if after < len(low) - 1 and low[after] in _OPS:
                return True
            at = low.find(word, at + 1)
    return False


def _suspect(word: str, low: str, mysql: bool) -> bool:
    """Whether ``word`` alone may hold a secret."""
    if _long_run(word):
        return True
    if len(word) >= _LONG_RUN:
        for marker in _MARKERS:
            if marker in low:
                return True
    if ("=" in low or ":" in low) and _assignment(low):
        return True
    if "://" in low and "@" in low and ":" in low.split("://", 1)[1].split("@", 1)[0]:
        return True
    if "<" in low and ("pass" in low or "secret" in low or "token" in low or "key" in low):
        return True
    if low.startswith(("-u=", "--user=")):
        return True
    return mysql and low.startswith("-p") and len(low) > 2


def _bare(low: str) -> str:
    """``low`` without quotes and punctuation around it."""
    return low.strip(_QUOTES + "(){}[],;")


def _values_after(words: list[str], lows: list[str], i: int, netrc: bool) -> list[int]:
    """The positions after word ``i`` that may hold a secret value because of word ``i``."""
    n = len(words)
    if i + 1 >= n:
        return []
    low, nxt = lows[i], lows[i + 1]
    bare = _bare(low)
    out: list[int] = []
    key = bare.rstrip(_OPS).rstrip(_QUOTES).endswith(_KEY_WORDS)
    if key and low.rstrip(_QUOTES).endswith(tuple(_OPS)):
        out.append(i + 1)  # ``password: VALUE``, ``API_KEY= VALUE``
    elif key and nxt[:1] in (":", "="):
        out.append(i + 1)  # ``password = VALUE``, ``token =VALUE``
        if nxt.strip(_OPS + ">") == "" and i + 2 < n:
            out.append(i + 2)
    if low.startswith("--") and bare.endswith(_FLAG_WORDS):
        out.append(i + 1)  # ``--token VALUE``
    if bare.endswith(_PROSE_WORDS) and nxt.rstrip(":") in ("is", "was") and i + 2 < n:
        out.append(i + 2)  # ``the password is VALUE``
        if lows[i + 2] == ":" and i + 3 < n:
            out.append(i + 3)
    if bare.endswith(("bearer", "basic")) and len(words[i + 1]) >= 8:
        out.append(i + 1)  # ``Bearer VALUE``, ``Basic VALUE``
    if bare in ("token", "bot") and i > 0 and "authorization" in lows[i - 1]:
        out.append(i + 1)  # ``Authorization: token VALUE``
    if low in ("-u", "--user") and ":" in nxt:
        out.append(i + 1)  # ``curl -u user:pass``
    if netrc and bare == "password":
        out.append(i + 1)  # ``machine HOST login USER password VALUE``
    return out


def _private_keys(lows: list[str]) -> set[int]:
    """The words of a private key block, from its ``-----BEGIN`` to its ``-----END ... KEY-----``."""
    masked: set[int] = set()
    inside = False
    for i, low in enumerate(lows):
        if "-----begin" in low:
            inside = True
        if inside:
            masked.add(i)
            if (
                low.endswith("-----")
                and "-----begin" not in low
                and i > 0
                and "-----end" in " ".join(lows[i - 4 : i + 1])
            ):
                inside = False
    return masked


def screen(text: str) -> str:
    """``text`` with every word that could hold a secret replaced by ``MASK`` (words are
    separated by whitespace; the result joins them with single spaces). No ``re``; see the
    module docstring."""
    words = text.split()
    lows = [word.lower() for word in words]
    whole = text.lower()
    mysql = "mysql" in whole
    netrc = "machine" in whole
    masked = _private_keys(lows) if "private" in whole and "-----begin" in whole else set()
    for i, word in enumerate(words):
        if i not in masked and _suspect(word, lows[i], mysql):
            masked.add(i)
        masked.update(_values_after(words, lows, i, netrc))
    return " ".join(MASK if i in masked else word for i, word in enumerate(words))

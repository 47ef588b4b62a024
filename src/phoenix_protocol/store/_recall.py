"""How memories are ranked: one analyzer and one scorer, the same on SQLite and PostgreSQL.

The engines' own full-text search ranked the same memories differently (FTS5's BM25 over every
namespace of the file, ``ts_rank_cd`` over each document alone, two stemmers, two stop-word
lists). Recall now reads plain rows from either engine and ranks them here:

- ``terms(text)``: lower-cased words (letters and digits), English stop words removed (``STOP_WORDS``:
  the usual function words plus the words of a question, "how", "which", "does"), then the
  Snowball English stemmer (``snowballstemmer``, Porter2). A memory's terms (its text and its
  tags) are kept in ``phx_memory_terms`` (``memory_id, namespace, term, tf``) and its term count in
  ``phx_memories.term_count``, written in the transaction that stores the memory;
  ``ANALYZER_VERSION`` in ``phx_memories.analyzed`` says which analyzer wrote them (a row an
  earlier release stored, or a row whose text changed by hand, is analysed again on the next
  recall in its namespace).
- ``bm25``: Okapi BM25 (``K1``, ``B``) with the namespace as the corpus (document frequencies and
  the mean length of that namespace only), divided by the best score the query could reach (every
  query term at saturation): a share of the query's weight in [0, 1). A memory below
  ``MIN_SCORE`` is not returned: an unrelated question gets nothing rather than the memory that
  happens to share one word with it.
- ``fuse``: reciprocal rank fusion (``RRF_K``) of the lexical ranking and a semantic one
  (cosine of sentence embeddings, at least ``MIN_COSINE``; ``store._memory``), scaled so that
  first in both lists is 1.0.

The thresholds were chosen on ``bench/data/recall_dev.json`` only; the held-out set and the
figures: ``bench/recall_quality.py``, ``docs/benchmarks.md``.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

__all__ = [
    "ANALYZER_VERSION",
    "MIN_COSINE",
    "MIN_SCORE",
    "STOP_WORDS",
    "Embedder",
    "bm25",
    "bm25_scorer",
    "fuse",
    "terms",
]

ANALYZER_VERSION = 1
"""Bumped when ``terms`` changes: rows analysed by an earlier version are analysed again."""
K1 = 1.2
B = 0.75
MIN_SCORE = 0.06
"""The least normalised BM25 score a lexical match needs (tuned on the dev set)."""
MIN_COSINE = 0.3
"""The least cosine a semantic match needs (tuned on the dev set)."""
RRF_K = 60
MAX_TERM = 64


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


STOP_WORDS = _words(
    """a about above after again against all also am an and any are aren as at be because been before
    being below between both but by can cannot could couldn did didn do does doesn doing don down during
    each either etc ever every few for from further had hadn has hasn have haven having he her here hers
    herself him himself his how i if in into is isn it its itself just let ll me might mightn more most
    must mustn my myself need needn no nor not now of off on once one only or other our ours ourselves out
    over own re s same shall shan she should shouldn so some such t than that the their theirs them
    themselves then there these they this those through to too under until up upon us ve very was wasn we
    were weren what when where which while who whom whose why will with won would wouldn yet you your yours
    yourself yourselves get gets got getting thing things way"""
)
"""English function words and the words of a question, never searched for."""


@functools.cache
def _stemmer() -> Any:
    import snowballstemmer

    return snowballstemmer.stemmer("english")


@functools.lru_cache(maxsize=100_000)
def _stem(word: str) -> str:
    return str(_stemmer().stemWord(word))


def terms(text: str) -> list[str]:
    """The search terms of ``text``, in order (repeats kept): lower-cased words of letters and
    digits, stop words and single letters dropped, stemmed (Snowball English)."""
    words = "".join(ch if ch.isalnum() else " " for ch in text.lower()).split()
    out = []
    for word in words:
        if word in STOP_WORDS or (len(word) == 1 and not word.isdigit()):
            continue
        out.append(_stem(word)[:MAX_TERM])
    return out


def document_terms(text: str, tags: Iterable[str]) -> Counter[str]:
    """A memory's terms with their counts: its text's and its tags'."""
    return Counter(terms(" ".join([text, *tags])))


def bm25_scorer(
    query: Sequence[str], *, df: Mapping[str, int], count: int, mean_length: float
) -> Callable[[Mapping[str, int], int], float]:
    """``bm25`` for one query over many memories: the terms' weights computed once."""
    weights = []
    best = 0.0
    for term in dict.fromkeys(query):
        n = df.get(term, 0)
        idf = math.log(1.0 + (count - n + 0.5) / (n + 0.5))
        best += idf * (K1 + 1.0)
        weights.append((term, idf * (K1 + 1.0)))

    def score(doc: Mapping[str, int], length: int) -> float:
        norm = K1 * (1.0 - B + B * length / mean_length) if mean_length > 0 else K1
        total = 0.0
        for term, weight in weights:
            tf = doc.get(term, 0)
            if tf:
                total += weight * tf / (tf + norm)
        return total / best if best > 0 else 0.0

    return score


def bm25(
    query: Sequence[str],
    doc: Mapping[str, int],
    length: int,
    *,
    df: Mapping[str, int],
    count: int,
    mean_length: float,
) -> float:
    """``doc``'s BM25 score for the distinct ``query`` terms over a corpus of ``count`` memories
    of ``mean_length`` terms (``df``: how many hold each term), divided by the query's best
    possible score: 0 for no match, under 1 for any. Same inputs, same float on any machine."""
    return bm25_scorer(query, df=df, count=count, mean_length=mean_length)(doc, length)


def fuse(rankings: Sequence[Sequence[str]]) -> dict[str, float]:
    """Reciprocal rank fusion of several rankings (ids, best first): ``sum 1 / (RRF_K + rank)``,
    scaled so that first in every ranking is 1.0."""
    if not rankings:
        return {}
    top = len(rankings) / (RRF_K + 1)
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            fused[key] = fused.get(key, 0.0) + 1.0 / (RRF_K + rank)
    return {key: value / top for key, value in fused.items()}


class Embedder(Protocol):
    """Sentence embeddings for semantic recall (the ``[persona]`` extra's model: ``services``
    supplies it, the store never loads a model itself)."""

    @property
    def name(self) -> str:
        """Names the model: embeddings are stored per memory and model."""
        ...

    def encode(self, texts: Sequence[str]) -> Any:
        """L2-normalised embeddings, one row per text (a numpy ``float32`` array)."""
        ...

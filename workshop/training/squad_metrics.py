"""SQuAD v1.1 evaluation: exact match and token-level F1.

Why: to compare our fine-tuned model with published SQuAD numbers we must
score answers exactly as the official v1.1 evaluation script does. Both
metrics compare *normalized* strings (lowercase, no punctuation, no articles
a/an/the, collapsed whitespace), so "The Eiffel Tower." and "eiffel tower"
count as the same answer. Each prediction is scored against every gold
answer and the best score is kept, because annotators often marked different
but equally valid spans. This module re-implements the official logic
(no network access is needed to fetch the script or an ``evaluate`` metric).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and articles, and collapse whitespace.

    The order (lower, punctuation, articles, whitespace) is the official one;
    it matters, e.g. "The." loses its "." first and then the article.
    """
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _exact_match_single(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def _f1_single(prediction: str, gold: str) -> float:
    """Harmonic mean of token precision and recall, with multiset overlap."""
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    common = Counter(pred_tokens) & Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        # Also covers empty predictions/golds, as in the official v1.1 script.
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _max_over_golds(metric: Callable[[str, str], float], prediction: str, golds: Sequence[str]) -> float:
    if isinstance(golds, str) or len(golds) == 0:
        raise ValueError("golds must be a non-empty list of answer strings")
    return max(metric(prediction, gold) for gold in golds)


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 if the normalized prediction equals any normalized gold, else 0.0."""
    return _max_over_golds(_exact_match_single, prediction, golds)


def f1(prediction: str, golds: Sequence[str]) -> float:
    """Best token-level F1 (0.0-1.0) of the prediction against any gold."""
    return _max_over_golds(_f1_single, prediction, golds)


def squad_scores(preds: list[str], golds: list[list[str]]) -> dict[str, float]:
    """Corpus-level {"exact_match", "f1"} in percent (0-100), as SQuAD reports them.

    ``golds[i]`` holds all gold answers for ``preds[i]``; each question's score
    is the max over its golds, then scores are averaged over questions.
    """
    if len(preds) != len(golds):
        raise ValueError(f"{len(preds)} predictions but {len(golds)} gold lists")
    if not preds:
        raise ValueError("cannot score an empty set of predictions")
    em_total = sum(exact_match(p, g) for p, g in zip(preds, golds))
    f1_total = sum(f1(p, g) for p, g in zip(preds, golds))
    return {"exact_match": 100.0 * em_total / len(preds), "f1": 100.0 * f1_total / len(preds)}

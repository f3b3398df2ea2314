"""Answer metrics: exact match, token F1 (with precision and recall), cover-EM and multiple-choice accuracy.

All string metrics compare `normalize_answer` forms and take the maximum over the gold aliases.

Normalization (recorded in reports as `NORMALIZATION`) is SQuAD's / HotpotQA's `normalize_answer` —
lowercase, delete punctuation, drop the articles a/an/the, collapse whitespace — with four additions,
each applied to predictions and golds alike:

0. control and format characters (Unicode Cc, Cf) are deleted first, whitespace excepted (a newline or tab
   still separates words): a zero-width space, a soft hyphen, a BOM or an escape character inside a word
   is invisible to a reader, and must not decide a match.
1. accents are folded: Unicode NFKD, then combining marks are dropped (`Gödel` -> `godel`,
   `ﬁ` -> `fi`, full-width digits -> ASCII). Letters without a decomposition (`ł`, `ø`, `ß`) stay. This
   holds in every script (Cyrillic `й` -> `и`, kana `が` -> `か`): lossy, but the same on both sides.
2. every Unicode punctuation character (category P*) is deleted, not only ASCII's `string.punctuation`,
   so curly quotes and dashes behave like their ASCII forms (`O’Neil` == `O'Neil` -> `oneil`).
3. articles are kept when nothing else is left (`The The` -> `the the`, the option letter `A` -> `a`),
   so that such answers cannot be matched by an empty prediction.

Rules: F1 follows HotpotQA — if either side normalizes to `yes`, `no` or `noanswer` and they differ, F1,
precision and recall are 0; among several aliases, the reported (F1, precision, recall) all come from the
alias with the best F1. cover-EM ("acc" in FlashRAG) is 1 when a normalized gold occurs in the normalized
prediction as a whole-token run (`12` is not found in `112`; FlashRAG's plain substring test would find
it). An empty prediction, and golds that normalize to nothing, score 0. For multiple-choice questions,
`mc_acc` is 1 when the option letter read from the prediction (`extract_choice`) is the golden letter.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence

from ragteam.types import Question

NORMALIZATION = (
    "squad+hotpotqa normalize_answer (lowercase, delete punctuation, drop articles a/an/the, collapse "
    "whitespace) + control/format characters (Cc, Cf; not whitespace) deleted + unicode NFKD with combining marks dropped (accents folded) + all Unicode punctuation "
    "(P*) deleted + articles kept when they are the whole answer; F1 with HotpotQA's yes/no/noanswer rule; "
    "max over gold aliases (precision/recall from the best-F1 alias); cover_em = a normalized gold occurs "
    "in the normalized prediction on token boundaries; empty prediction scores 0; mc_acc = option letter "
    "extracted from the prediction equals the golden letter"
)

_ASCII_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPECIAL = ("yes", "no", "noanswer")


def fold_accents(text: str) -> str:
    """NFKD-decompose `text` and drop the combining marks (`é` -> `e`)."""
    return "".join(ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch))


def drop_invisible(text: str) -> str:
    """`text` without control and format characters (Unicode Cc, Cf), whitespace kept."""
    return "".join(ch for ch in text if ch.isspace() or unicodedata.category(ch) not in ("Cc", "Cf"))


def _is_punct(ch: str) -> bool:
    return ch in _ASCII_PUNCT or unicodedata.category(ch).startswith("P")


def normalize_answer(text: str) -> str:
    """The normalized form of an answer (see the module docstring): `"The Gödel-Prize!"` -> `"godelprize"`."""
    text = drop_invisible(fold_accents(text or "")).lower()
    text = "".join(ch for ch in text if not _is_punct(ch))
    stripped = " ".join(_ARTICLES.sub(" ", text).split())
    return stripped if stripped else " ".join(text.split())


def _golds(golds: Sequence[str] | str) -> list[str]:
    """Normalized, non-empty gold aliases (a bare string is one alias)."""
    items = [golds] if isinstance(golds, str) else list(golds)
    return [g for g in (normalize_answer(str(x)) for x in items) if g]


def exact_match(prediction: str, golds: Sequence[str] | str) -> float:
    """1.0 when the normalized prediction equals a normalized gold alias, else 0.0."""
    pred = normalize_answer(prediction)
    return float(bool(pred) and pred in _golds(golds))


def _f1_pair(pred: str, gold: str) -> tuple[float, float, float]:
    """(F1, precision, recall) of two normalized answers, with HotpotQA's yes/no/noanswer rule."""
    if (pred in _SPECIAL or gold in _SPECIAL) and pred != gold:
        return 0.0, 0.0, 0.0
    pred_tokens, gold_tokens = pred.split(), gold.split()
    same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0, 0.0, 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall


def f1_score(prediction: str, golds: Sequence[str] | str) -> tuple[float, float, float]:
    """(F1, precision, recall) against the gold alias with the best F1 (ties: higher precision, recall)."""
    pred = normalize_answer(prediction)
    if not pred:
        return 0.0, 0.0, 0.0
    return max((_f1_pair(pred, g) for g in _golds(golds)), default=(0.0, 0.0, 0.0))


def cover_em(prediction: str, golds: Sequence[str] | str) -> float:
    """1.0 when some normalized gold alias occurs in the normalized prediction as a whole-token run."""
    pred = normalize_answer(prediction)
    if not pred:
        return 0.0
    padded = f" {pred} "
    return float(any(f" {g} " in padded for g in _golds(golds)))


# --- multiple choice ------------------------------------------------------------------------------------

_MARKUP = re.compile(r"[*_`#]+")


def _letter_class(letters: Sequence[str]) -> str:
    return "[" + "".join(re.escape(x) for x in letters) + "]"


def extract_choice(prediction: str, choices: Mapping[str, str]) -> str | None:
    """The option letter a free-text answer picks, or None; never raises.

    Tried in order, the first that finds something wins:
    1. the whole answer is a letter (`B`, `(B)`, `B.`, `[b]`);
    2. the last "answer ... X" statement (`The answer is (C).`, `Final answer: C`, `answer: option C`);
    3. the last "option/choice X is correct" or "correct option/choice is X";
    4. a leading letter with a delimiter (`B. Tell the attending...`, `(B) ...`, `B) ...`, `B: ...`);
    5. the text of one option found in the answer (the longest when one contains the others);
    6. one distinct letter in parentheses (`... so (D) fits`);
    7. one distinct standalone capital letter (`A`/`I` before a lowercase word other than `or`, `and`, `is`,
       ... are read as the article / pronoun).
    """
    try:
        return _extract_choice(prediction or "", choices)
    except Exception:  # noqa: BLE001 - a parser of model output never raises
        return None


def _extract_choice(prediction: str, choices: Mapping[str, str]) -> str | None:
    letters = [k for k in choices if len(k) == 1]
    text = _MARKUP.sub("", prediction).strip()
    if not text or not choices:
        return None
    by_upper = {k.upper(): k for k in letters}
    if letters:
        cls = _letter_class(sorted({*letters, *(x.lower() for x in letters)}))
        bare = re.fullmatch(rf"[\(\[]?\s*({cls})\s*[\)\]]?\s*[.:]?", text)
        if bare:
            return by_upper[bare.group(1).upper()]
        up = _letter_class(letters)
        end = r"(?![A-Za-z0-9])"
        tiers = [
            (
                rf"(?i:answer)\s*(?i:is|would\s+be|will\s+be|should\s+be)?\s*[:=\-]?\s*(?i:option|choice)?\s*"
                rf"[\(\[]?\s*({up}){end}"
            ),
            rf"(?i:option|choice)\s*[\(\[]?({up}){end}[\)\]]?\s*(?i:is\s+(?:the\s+)?(?:correct|right|best))",
            rf"(?i:correct|right|best)\s+(?i:option|choice)\s*(?i:is)?\s*[:\-]?\s*[\(\[]?({up}){end}",
            # a lowercase letter only as the very last thing said ("... so the answer is b.")
            rf"(?i:answer)\s*(?i:is)?\s*[:=\-]?\s*[\(\[]?\s*({cls})\s*[\)\]]?\s*[.!]?\s*$",
        ]
        for pattern in tiers:
            found = re.findall(pattern, text)
            if found:
                return by_upper[found[-1].upper()]
        lead = re.match(rf"\s*(?:[\(\[]\s*({up})\s*[\)\]]|({up})\s*[.):\-](?!\w))", text)
        if lead:
            return lead.group(1) or lead.group(2)
    by_text = _choice_by_text(text, choices)
    if by_text is not None or not letters:
        return by_text
    in_parens = set(re.findall(rf"[\(\[]\s*({up})\s*[\)\]]", text))
    if len(in_parens) == 1:
        return in_parens.pop()
    standalone = {
        m.group(1)
        for m in re.finditer(rf"(?<![A-Za-z0-9'])({up}){end}", text)
        if not (m.group(1) in ("A", "I") and _reads_as_word(text[m.end() :]))
    }
    return standalone.pop() if len(standalone) == 1 else None


# After these words a capital A / I is still an option letter ("A or B", "A is right").
_LETTER_FOLLOWERS = frozenset(
    (
        "or",
        "and",
        "nor",
        "vs",
        "versus",
        "is",
        "was",
        "seems",
        "looks",
        "would",
        "could",
        "might",
        "appears",
        "fits",
    )
)


def _reads_as_word(rest: str) -> bool:
    """Whether a standalone `A` / `I` followed by `rest` is the article / pronoun rather than a letter."""
    m = re.match(r"\s+([a-z]+)", rest)
    return bool(m) and m.group(1) not in _LETTER_FOLLOWERS


def _choice_by_text(text: str, choices: Mapping[str, str]) -> str | None:
    padded = f" {normalize_answer(text)} "
    hits = [(k, normalize_answer(v)) for k, v in choices.items()]
    hits = [(k, v) for k, v in hits if v and f" {v} " in padded]
    if not hits:
        return None
    longest_key, longest = max(hits, key=lambda kv: len(kv[1]))
    if all(v == longest or f" {v} " in f" {longest} " for k, v in hits if k != longest_key):
        others = [k for k, v in hits if v == longest and k != longest_key]
        return None if others else longest_key
    return None


def mc_accuracy(prediction: str, question: Question) -> float:
    """1.0 when the letter extracted from `prediction` is one of the question's golden letters."""
    if not question.choices:
        return 0.0
    letter = extract_choice(prediction, question.choices)
    golds = {g.strip().upper() for g in question.golden_answers}
    return float(letter is not None and letter.upper() in golds)


def score_answer(prediction: str, question: Question) -> dict[str, float]:
    """em, f1, precision, recall, cover_em of `prediction` against the question's golden answers
    (and mc_acc for a multiple-choice question)."""
    prediction = prediction if isinstance(prediction, str) else ""
    golds = question.golden_answers
    f1, precision, recall = f1_score(prediction, golds)
    scores = {
        "em": exact_match(prediction, golds),
        "f1": f1,
        "precision": precision,
        "recall": recall,
        "cover_em": cover_em(prediction, golds),
    }
    if question.choices:
        scores["mc_acc"] = mc_accuracy(prediction, question)
    return scores

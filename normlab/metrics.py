"""Metrics: BLEU (two kinds, each named for what it is) and accuracy with a confidence interval over seeds.

BLEU
----
:func:`bleu` returns both numbers for the same detokenized hypotheses and references:

* ``sacrebleu``: sacreBLEU's default on *detokenized* text (cased, its ``13a`` tokenizer, exp smoothing),
  reported with its signature. This is the standard number, comparable across papers and toolkits.
* ``tokenized_bleu``: BLEU the way fairseq's IWSLT14 De-En recipe reports it, i.e. the number the paper's
  ~34 (and 35.5) stands beside. There, ``prepare-iwslt14.sh`` Moses-tokenizes (``tokenizer.perl -l en``, no
  aggressive dash splitting) and then lowercases every side, the model works on BPE of that text, and
  ``fairseq-generate --remove-bpe`` scores with its built-in scorer (``--scoring bleu``): corpus BLEU-4 on the
  whitespace tokens of the tokenized, lowercased text, brevity penalty, no smoothing. normlab's models work on
  raw text, so here the detokenized hypotheses and references are Moses-tokenized (``sacremoses``, the Python
  port of ``tokenizer.perl``), then lowercased, then scored by sacreBLEU with ``tokenize="none"``,
  ``smooth_method="none"``. Differences from fairseq's number that remain: fairseq scores text that was
  tokenized *before* training and never detokenized, and its reference ``<unk>`` never matches; both move
  BLEU by hundredths at most on IWSLT (no ``<unk>`` with a BPE vocabulary).
  Without ``sacremoses`` installed, the tokenization falls back to sacreBLEU's ``13a`` on lowercased text
  (``BLEU(tokenize="13a", lowercase=True, smooth_method="none")``); 13a differs from Moses in that it keeps
  apostrophes inside words (``don't``; Moses: ``don 't``) and splits every period (``e . g .``; Moses keeps
  known abbreviations), typically a few tenths of BLEU. The signature says which tokenizer was used.

Accuracy with a confidence interval
-----------------------------------
:func:`mean_ci` gives mean +- t_{(1+c)/2, n-1} * s / sqrt(n) over seeds (Student's t, sample standard
deviation); :func:`t_quantile` computes the t quantile from the regularized incomplete beta function
(scipy is not a dependency).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

__all__ = ["BleuScores", "bleu", "moses_available", "accuracy", "t_quantile", "MeanCI", "mean_ci", "unigram_entropy",
           "majority_share", "masked_lm_unigram_loss", "unigram_plateau", "RankCorrelation", "spearman",
           "spearman_within"]


@dataclasses.dataclass(frozen=True)
class BleuScores:
    """Both BLEU scores of one corpus (module docstring)."""

    sacrebleu: float  # detokenized, sacreBLEU default (cased, 13a): the standard
    sacrebleu_signature: str
    sacrebleu_detail: str  # sacreBLEU's line: "BLEU = .. p1/p2/p3/p4 (BP = .. ratio = .. hyp_len = .. ref_len = ..)"
    tokenized_bleu: float  # fairseq IWSLT14 style: Moses-tokenized, lowercased, tokens as they are, no smoothing
    tokenized_bleu_signature: str
    tokenized_bleu_detail: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def moses_available() -> bool:
    try:
        import sacremoses  # noqa: F401
    except ImportError:
        return False
    return True


@lru_cache(maxsize=4)
def _moses(lang: str):
    from sacremoses import MosesTokenizer

    return MosesTokenizer(lang=lang)


def _moses_lc(text: str, lang: str) -> str:
    # prepare-iwslt14.sh: tokenizer.perl first (its non-breaking prefixes are case-sensitive), then lowercase.
    # escape=False: tokenizer.perl escapes & ' " etc. as &amp; &apos; ..., a one-to-one renaming of tokens that
    # changes no n-gram match.
    return _moses(lang).tokenize(text, escape=False, return_str=True).lower()


def bleu(
    hypotheses: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    *,
    lang: str = "en",
    tokenizer: str | None = None,
) -> BleuScores:
    """Corpus BLEU of detokenized ``hypotheses`` against ``references`` (one string per hypothesis, or a list
    of reference streams as sacreBLEU takes them). ``tokenizer`` for the tokenized BLEU: ``"moses"``
    (needs ``sacremoses``), ``"13a"``, or None = moses when installed, else 13a."""
    hyps = list(hypotheses)
    streams = [list(references)] if not references or isinstance(references[0], str) else [list(r) for r in references]
    for s in streams:
        if len(s) != len(hyps):
            raise ValueError(f"{len(hyps)} hypotheses but a reference stream of {len(s)}")
    if tokenizer is None:
        tokenizer = "moses" if moses_available() else "13a"
    if tokenizer not in ("moses", "13a"):
        raise ValueError(f"tokenizer must be 'moses' or '13a', got {tokenizer!r}")

    # imported here, not with normlab: sacreBLEU pulls in lxml, ~0.2 s of every command's start-up, and a Ctrl-C
    # that lands inside lxml.etree's C initialisation is lost (a new user's interrupt at start-up let the run train on)
    from sacrebleu.metrics import BLEU

    standard = BLEU()
    s = standard.corpus_score(hyps, streams)
    if tokenizer == "moses":
        if not moses_available():
            raise ImportError("tokenizer='moses' needs sacremoses: pip install sacremoses")
        # the text is already lowercased (_moses_lc); lowercase=True changes no score and makes the signature say
        # case:lc rather than sacreBLEU's case:mixed for the text it was given
        tok_metric = BLEU(tokenize="none", lowercase=True, smooth_method="none", force=True)
        tok_hyps = [_moses_lc(h, lang) for h in hyps]
        t = tok_metric.corpus_score(tok_hyps, [[_moses_lc(r, lang) for r in st] for st in streams])
        prefix = f"moses-{lang}+lc|"
    else:
        tok_metric = BLEU(tokenize="13a", lowercase=True, smooth_method="none")
        t = tok_metric.corpus_score(hyps, streams)
        prefix = ""
    return BleuScores(
        sacrebleu=s.score,
        sacrebleu_signature=str(standard.get_signature()),
        sacrebleu_detail=str(s),
        tokenized_bleu=t.score,
        tokenized_bleu_signature=prefix + str(tok_metric.get_signature()),
        tokenized_bleu_detail=str(t),
    )


# --------------------------------------------------------------------------------------------------------
# Accuracy and confidence intervals


def accuracy(predictions: Sequence[int], labels: Sequence[int]) -> float:
    """Fraction of predictions equal to their label."""
    if len(predictions) != len(labels):
        raise ValueError(f"{len(predictions)} predictions for {len(labels)} labels")
    if not labels:
        raise ValueError("accuracy of an empty set")
    return sum(int(p) == int(y) for p, y in zip(predictions, labels)) / len(labels)


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz; Numerical Recipes 6.4)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            return h
    raise ArithmeticError("incomplete beta: continued fraction did not converge")


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom: 1 - I_{df/(df+t^2)}(df/2, 1/2) / 2 for t >= 0."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`t_cdf`, to ~1e-12)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, 2.0 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


@dataclasses.dataclass(frozen=True)
class MeanCI:
    """Mean of ``n`` values (e.g. accuracies over seeds) with a two-sided Student-t confidence interval."""

    mean: float
    half_width: float  # t_{(1+c)/2, n-1} * sd / sqrt(n); nan for n = 1
    sd: float  # sample standard deviation (n - 1 in the denominator)
    n: int
    confidence: float

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width

    def __str__(self) -> str:
        return f"{self.mean:.4f} ± {self.half_width:.4f} ({100 * self.confidence:g}% CI, n={self.n})"

    def to_dict(self) -> dict[str, Any]:
        return dict(dataclasses.asdict(self), low=self.low, high=self.high)


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> MeanCI:
    """Mean and Student-t confidence interval of ``values`` (independent runs, e.g. fine-tuning seeds)."""
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        raise ValueError("mean_ci of no values")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    mean = math.fsum(xs) / n
    if n == 1:
        return MeanCI(mean=mean, half_width=math.nan, sd=math.nan, n=1, confidence=confidence)
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile((1.0 + confidence) / 2.0, n - 1) * sd / math.sqrt(n)
    return MeanCI(mean=mean, half_width=half, sd=sd, n=n, confidence=confidence)


@dataclasses.dataclass(frozen=True)
class RankCorrelation:
    """Spearman's rank correlation ``rho`` of ``n`` pairs and the one-sided permutation p-value of a correlation at
    most ``rho`` (``p_below``: the alternative "the second variable falls as the first rises"), over every
    permutation when ``exact``, else over ``permutations`` random ones."""

    rho: float
    n: int
    p_below: float
    exact: bool
    permutations: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _ranks(xs: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties given their mean rank (Spearman's convention)."""
    order = np.argsort(xs, kind="stable")
    ranks = np.empty(len(xs), dtype=float)
    ranks[order] = np.arange(1, len(xs) + 1, dtype=float)
    for v in np.unique(xs):
        tied = xs == v
        ranks[tied] = ranks[tied].mean()
    return ranks


def _rho(rx: np.ndarray, ry: np.ndarray) -> np.ndarray:
    """Pearson's correlation of rank vectors: ``ry`` may be a (k, n) stack of permutations."""
    a = rx - rx.mean()
    b = ry - ry.mean(axis=-1, keepdims=True)
    return (b @ a) / np.sqrt((a @ a) * (b * b).sum(axis=-1))


def _orderings(n: int, permutations: int, seed: int) -> tuple[np.ndarray, bool]:
    """Every ordering of n items while n! <= ``permutations`` (exact), else ``permutations`` random ones from ``seed``."""
    if math.factorial(n) <= permutations:
        return np.array(list(itertools.permutations(range(n)))), True
    rng = np.random.default_rng(seed)
    return np.array([rng.permutation(n) for _ in range(permutations)]), False


def spearman_within(cells: dict[tuple[Any, Any], tuple[float, float]], *, permutations: int = 50_000,
                    seed: int = 0) -> RankCorrelation:
    """Spearman's rho of x against y within each stratum, averaged over the strata, with a permutation p that moves
    whole units: ``cells[(unit, stratum)] = (x, y)``, e.g. a sweep's (scheme, width) cells. Why not
    :func:`spearman` over all cells: a unit's cells (one scheme at two widths) share its level and are not
    independent, so shuffling cells one by one understates the null's spread (a review found p 0.03 where moving
    schemes as units gives 0.08); and the strata can carry their own trend (every scheme's S and edge fall from
    d = 64 to 128), which pooling would mix into the correlation across units. So: the statistic is the mean over
    strata of the rank correlation across units; the null reassigns the units' y-values (all strata together)
    to other units' x-values, over every ordering of the units while n! <= ``permutations``, else that many
    random ones (p = (1 + count) / (1 + permutations)). Units present in every stratum only (``n``: their count);
    a stratum whose x or y is constant adds nothing. Non-finite values are an error."""
    units = sorted({u for u, _ in cells}, key=str)
    strata = sorted({t for _, t in cells}, key=str)
    units = [u for u in units if all((u, t) in cells for t in strata)]
    vals = np.array([[cells[(u, t)] for t in strata] for u in units], dtype=float).reshape(len(units), len(strata), 2)
    if not np.isfinite(vals).all():
        raise ValueError("spearman_within: non-finite values")
    n = len(units)
    keep = [k for k in range(len(strata)) if n >= 3 and np.ptp(vals[:, k, 0]) > 0 and np.ptp(vals[:, k, 1]) > 0]
    if not keep:
        return RankCorrelation(rho=math.nan, n=n, p_below=1.0, exact=True, permutations=0)
    rx = [_ranks(vals[:, k, 0]) for k in keep]
    ry = [_ranks(vals[:, k, 1]) for k in keep]
    rho = float(np.mean([_rho(a, b) for a, b in zip(rx, ry)]))
    perms, exact = _orderings(n, permutations, seed)
    null = np.mean([_rho(a, b[perms]) for a, b in zip(rx, ry)], axis=0)
    below = int((null <= rho + 1e-12).sum())
    p = below / len(perms) if exact else (1 + below) / (1 + len(perms))
    return RankCorrelation(rho=rho, n=n, p_below=p, exact=exact, permutations=len(perms))


def spearman(x: Sequence[float], y: Sequence[float], *, permutations: int = 20_000, seed: int = 0) -> RankCorrelation:
    """Spearman's rho of ``x`` and ``y`` and its one-sided permutation p-value (RankCorrelation). A permutation test
    needs no large-n approximation, which a handful of sweep cells would not meet; exact (every one of the n!
    orderings of ``y``) while n! <= ``permutations``, else ``permutations`` random orderings from ``seed``
    (deterministic) and p = (1 + count) / (1 + permutations), never 0 (Phipson & Smyth 2010). NaN rho and p = 1
    when either variable is constant or n < 3; non-finite values are an error. Cells that are not independent
    (one unit measured in several strata): :func:`spearman_within`."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.shape != ys.shape or xs.ndim != 1:
        raise ValueError(f"spearman needs two sequences of one length, got {xs.shape} and {ys.shape}")
    # one stratum, each pair its own unit: spearman_within's statistic and permutation test are exactly these
    return spearman_within({(i, 0): (a, b) for i, (a, b) in enumerate(zip(xs, ys))}, permutations=permutations,
                           seed=seed)


def unigram_entropy(tokens: Sequence[int] | np.ndarray, reference: Sequence[int] | np.ndarray | None = None) -> float:
    """The loss, in nats per token, of predicting ``tokens`` from token frequencies alone.

    Without ``reference``: the entropy of the empirical distribution of ``tokens`` (the best context-free
    predictor fitted to exactly these tokens; on a small sample it is biased low, by ~(types - 1) / (2 n)).
    With ``reference`` (e.g. the training targets): the cross-entropy of the reference's unigram distribution
    (add-1/2 smoothed over the ids seen in either) on ``tokens``: what a model that learned the training data's
    token frequencies and nothing else scores on them, the "unigram plateau" that every model crosses first.
    report/claims.py gates the training claims on the latter."""
    tokens = np.asarray(tokens, dtype=np.int64).ravel()
    if tokens.size == 0:
        raise ValueError("unigram_entropy of no tokens")
    if reference is None:
        counts = np.bincount(tokens)
        p = counts[counts > 0] / tokens.size
        return float(-(p * np.log(p)).sum())
    ref = np.asarray(reference, dtype=np.int64).ravel()
    size = int(max(tokens.max(), ref.max() if ref.size else 0)) + 1
    seen = (np.bincount(ref, minlength=size) + np.bincount(tokens, minlength=size)) > 0
    q = np.bincount(ref, minlength=size) + 0.5 * seen
    q = q / q.sum()
    return float(-np.log(q[tokens]).mean())


def masked_lm_unigram_loss(h: float, mask: float = 0.8, random: float = 0.1, keep: float = 0.1) -> float:
    """The masked-LM loss, in nats, of a predictor that knows the token frequencies (unigram loss ``h``) and copies
    the visible token where the input is not [MASK]: BERT leaves ``keep`` of the selected positions unchanged and
    replaces ``random`` with a random token (data/tasks.py: 80/10/10), so where it sees a real token it is the
    target with probability a = keep / (keep + random). Predicting a on the visible token and (1 - a) x the
    frequencies elsewhere costs -ln a at a kept position and h - ln(1 - a) at a replaced one:
    mask h + keep (-ln a) + random (h - ln(1 - a)) = 0.9 h + 0.2 ln 2 for 80/10/10. A masked LM is below this only
    if it uses the context."""
    other = random + keep
    if other <= 0:
        return h
    a = keep / other
    return mask * h + (keep * -math.log(a) if keep else 0.0) + (random * (h - math.log(1 - a)) if random else 0.0)


def unigram_plateau(valid_targets: Sequence[int] | np.ndarray, train_targets: Sequence[int] | np.ndarray, *,
                    masked_lm: bool = False) -> dict[str, Any]:
    """The plateau a model must leave to count as having learned: the gate of report/claims.py's training claims
    and the line under which a sweep curve has a frontier (experiments/sweep.py), computed in one place.

    ``unigram_loss``: the cross-entropy of the training targets' unigram distribution on the validation targets
    (:func:`unigram_entropy` with a reference), nats per token; for a masked LM (``masked_lm``) the copy-aware
    :func:`masked_lm_unigram_loss` of it, with the all-masked value kept as ``unigram_loss_all_masked``. Beside
    it the plug-in entropy of the validation targets, their number and a sentence saying what it is."""
    valid = np.asarray(valid_targets, dtype=np.int64).ravel()
    u = unigram_entropy(valid, train_targets)
    out: dict[str, Any] = {
        "unigram_loss": u, "plugin_entropy": unigram_entropy(valid), "tokens": int(valid.size),
        "what": "cross-entropy (nats per token) of the training targets' unigram distribution on the validation "
        "targets: the loss of a model that learned token frequencies and nothing else"}  # fmt: skip
    if masked_lm:
        # BERT's kept 10% can be copied from the input: the plateau is lower than the unigram loss
        out["unigram_loss_all_masked"] = u
        out["unigram_loss"] = masked_lm_unigram_loss(u)
        out["what"] = ("the masked-LM loss of a predictor that knows the training tokens' frequencies and copies the "
                       "visible token where the input is not [MASK] (80/10/10 masking)")
    return out


def majority_share(labels: Sequence[int] | np.ndarray) -> float:
    """The share of the most frequent label: the accuracy of always predicting it."""
    counts = np.bincount(np.asarray(labels, dtype=np.int64).ravel())
    if counts.sum() == 0:
        raise ValueError("majority_share of no labels")
    return float(counts.max() / counts.sum())

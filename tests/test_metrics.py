"""BLEU (both kinds) against hand computation and sacreBLEU's documented example; t quantiles against the
standard table; accuracy confidence intervals against hand computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from normlab.metrics import accuracy, bleu, mean_ci, moses_available, spearman, spearman_within, t_cdf, t_quantile


def _geo(*precisions: float) -> float:
    return 100 * math.prod(precisions) ** (1 / len(precisions))


def test_bleu_by_hand():
    # 1-4 gram precisions 5/6, 3/5, 2/4, 1/3, equal lengths (no brevity penalty)
    s = bleu(["the cat sat on the mat"], ["the cat sat on a mat"], tokenizer="13a")
    assert s.sacrebleu == pytest.approx(_geo(5 / 6, 3 / 5, 2 / 4, 1 / 3), abs=1e-9)
    assert s.tokenized_bleu == pytest.approx(s.sacrebleu, abs=1e-9)


def test_brevity_penalty():
    # hypothesis of 5 tokens, reference of 6: precisions 5/5, 3/4, 2/3, 1/2 and BP = exp(1 - 6/5)
    s = bleu(["the cat sat on mat"], ["the cat sat on the mat"], tokenizer="13a")
    assert s.sacrebleu == pytest.approx(math.exp(1 - 6 / 5) * _geo(1, 3 / 4, 2 / 3, 1 / 2), abs=1e-9)


def test_sacrebleu_documented_example():
    """sacreBLEU's README example (two reference streams): BLEU = 48.53."""
    sys_ = ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."]
    refs = [
        ["The dog bit the man.", "It was not unexpected.", "The man bit him first."],
        ["The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."],
    ]
    s = bleu(sys_, refs, tokenizer="13a")
    assert round(s.sacrebleu, 2) == 48.53
    assert s.sacrebleu_signature.startswith("nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:")


HYP, REF = ["We don't know what it is."], ["we don't know what this is."]


def test_detokenized_bleu_is_cased_13a():
    # 13a tokens: We don't know what it is .  vs  we don't know what this is .  ("We" != "we"): matches 5/7,
    # 3/6, 1/5 and 0/4 n-grams; sacreBLEU's default exp smoothing (mteval's) counts the 4-grams as 1/(2 * 4)
    s = bleu(HYP, REF, tokenizer="13a")
    assert s.sacrebleu == pytest.approx(_geo(5 / 7, 3 / 6, 1 / 5, 1 / 8), abs=1e-9)
    assert "BP = 1.000" in s.sacrebleu_detail


def test_tokenized_bleu_13a_fallback_is_lowercased():
    s = bleu(HYP, REF, tokenizer="13a")
    assert s.tokenized_bleu == pytest.approx(_geo(6 / 7, 4 / 6, 2 / 5, 1 / 4), abs=1e-9)
    assert s.tokenized_bleu_signature == s.tokenized_bleu_signature.replace("moses", "")
    assert "case:lc" in s.tokenized_bleu_signature and "tok:13a" in s.tokenized_bleu_signature
    assert "smooth:none" in s.tokenized_bleu_signature  # fairseq's scorer does not smooth


@pytest.mark.skipif(not moses_available(), reason="sacremoses is not installed")
def test_tokenized_bleu_moses_splits_contractions():
    # Moses: we don 't know what it is .  (8 tokens; "'t" is a token as in prepare-iwslt14.sh's text)
    s = bleu(HYP, REF, tokenizer="moses")
    assert s.tokenized_bleu == pytest.approx(_geo(7 / 8, 5 / 7, 3 / 6, 2 / 5), abs=1e-9)
    assert s.tokenized_bleu_signature.startswith("moses-en+lc|") and "tok:none" in s.tokenized_bleu_signature
    assert "case:lc" in s.tokenized_bleu_signature  # what was scored: lowercased text (a new user read case:mixed)
    # Moses keeps known abbreviations in one token (mr. smith , e.g. here .); 13a splits every period
    t = bleu(["Mr. Smith, e.g. here."], ["Mr. Smith, e.g. there."], tokenizer="moses")
    assert t.tokenized_bleu == pytest.approx(_geo(5 / 6, 3 / 5, 2 / 4, 1 / 3), abs=1e-9)
    u = bleu(["Mr. Smith, e.g. here."], ["Mr. Smith, e.g. there."], tokenizer="13a")  # mr . smith , e . g . here .
    assert u.tokenized_bleu == pytest.approx(_geo(9 / 10, 7 / 9, 6 / 8, 5 / 7), abs=1e-9)


def test_tokenized_bleu_default_names_its_tokenizer():
    s = bleu(HYP, REF)
    assert s.tokenized_bleu_signature.startswith("moses-en+lc|") == moses_available()
    assert set(s.to_dict()) == {
        "sacrebleu", "sacrebleu_signature", "sacrebleu_detail",
        "tokenized_bleu", "tokenized_bleu_signature", "tokenized_bleu_detail",
    }  # fmt: skip


def test_bleu_errors():
    with pytest.raises(ValueError, match="reference stream"):
        bleu(["a b"], ["a b", "c d"])
    with pytest.raises(ValueError, match="tokenizer"):
        bleu(["a"], ["a"], tokenizer="spm")
    assert bleu(["a b c d"], ["a b c d"]).sacrebleu == pytest.approx(100.0)


# --------------------------------------------------------------------------------------------------------


# two-sided 95% (p = 0.975) and one-sided 95% (p = 0.95) critical values of Student's t (standard tables);
# df = 1 is the Cauchy distribution, t = tan(pi (p - 1/2)); df = 2 has t = (2p - 1) / sqrt(2 p (1 - p))
T_TABLE = {
    (0.975, 1): 12.7062047362, (0.975, 2): 4.30265272975, (0.975, 3): 3.18244630528, (0.975, 4): 2.7764451052,
    (0.975, 5): 2.57058183661, (0.975, 9): 2.26215716274, (0.975, 10): 2.22813885196, (0.975, 30): 2.04227245630,
    (0.975, 100): 1.98397151845, (0.95, 5): 2.01504837333, (0.995, 4): 4.60409487142,
    (0.9995, 1): math.tan(math.pi * 0.4995), (0.9, 2): 0.8 / math.sqrt(2 * 0.9 * 0.1),
}  # fmt: skip


@pytest.mark.parametrize("p, df", sorted(T_TABLE))
def test_t_quantile_matches_table(p, df):
    assert t_quantile(p, df) == pytest.approx(T_TABLE[(p, df)], rel=1e-9)
    assert t_quantile(1 - p, df) == pytest.approx(-T_TABLE[(p, df)], rel=1e-9)
    assert t_cdf(T_TABLE[(p, df)], df) == pytest.approx(p, abs=1e-10)


def test_t_cdf_special_cases():
    assert t_cdf(0.0, 7) == 0.5
    assert t_cdf(1.0, 1) == pytest.approx(0.75)  # Cauchy: 1/2 + atan(1)/pi
    assert t_cdf(2.0, 2) == pytest.approx(0.5 + 2 / (2 * math.sqrt(2 + 4)))  # df=2: 1/2 + t / (2 sqrt(2 + t^2))
    assert t_quantile(0.975, 10**6) == pytest.approx(1.959963985, rel=2e-6)  # -> the normal quantile
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


def test_mean_ci_by_hand():
    # mean 0.81, squared deviations sum to 1e-3, s^2 = 2.5e-4, se = s / sqrt(5), t_{0.975, 4} = 2.7764451052
    ci = mean_ci([0.80, 0.82, 0.79, 0.81, 0.83])
    assert ci.mean == pytest.approx(0.81)
    assert ci.sd == pytest.approx(math.sqrt(2.5e-4))
    assert ci.half_width == pytest.approx(2.7764451052 * math.sqrt(2.5e-4) / math.sqrt(5), rel=1e-9)
    assert ci.low == pytest.approx(0.81 - ci.half_width) and ci.high == pytest.approx(0.81 + ci.half_width)
    assert "± 0.0196" in str(ci) and "n=5" in str(ci)
    ci90 = mean_ci([1.0, 3.0], confidence=0.90)  # s = sqrt(2), t_{0.95, 1} = 6.3137515147
    assert ci90.half_width == pytest.approx(6.3137515147 * math.sqrt(2) / math.sqrt(2), rel=1e-9)
    one = mean_ci([0.7])
    assert one.mean == 0.7 and math.isnan(one.half_width)
    with pytest.raises(ValueError):
        mean_ci([])


def test_spearman_by_hand_and_its_permutation_p():
    """Spearman's rho against the textbook formula 1 - 6 sum d^2 / (n (n^2 - 1)) (no ties), ties at their mean rank,
    and the one-sided permutation p counted by hand (exact while n! <= permutations, else Monte Carlo, seeded)."""
    x, y = [1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 1.0, 4.0, 3.0, 5.0]  # rank differences 1, 1, 1, 1, 0: sum d^2 = 4
    r = spearman(x, y)
    torch.testing.assert_close(r.rho, 1 - 6 * 4 / (5 * 24), rtol=0, atol=1e-12)
    assert r.exact and r.permutations == 120
    down = spearman(x, x[::-1])  # the most negative ordering of 120: p = 1/120
    assert down.rho == pytest.approx(-1.0) and down.p_below == pytest.approx(1 / 120)
    # ties: y's two 1e-2s share rank 3.5, its two 1e-3s rank 1.5 (a sweep's edges one grid step apart); rho is the
    # Pearson correlation of (1, 2, 3, 4) and (3.5, 3.5, 1.5, 1.5); of the 24 orderings of y, the 4 that put both
    # 3.5s first reach it
    t = spearman([0.05, 0.1, 0.3, 0.4], [1e-2, 1e-2, 1e-3, 1e-3])
    torch.testing.assert_close(t.rho, -4 / math.sqrt(20), rtol=0, atol=1e-12)
    assert t.p_below == pytest.approx(4 / 24)
    # beyond n! > permutations: random orderings from the seed, p never 0, the same every call
    big = spearman(list(range(16)), list(range(16))[::-1], permutations=2000)
    assert not big.exact and big.p_below == pytest.approx(1 / 2001) and big.rho == pytest.approx(-1.0)
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=12), rng.normal(size=12)
    assert spearman(a, b, permutations=500) == spearman(a, b, permutations=500)
    rx, ry = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))  # no ties: rho is Pearson's of the ranks
    torch.testing.assert_close(spearman(a, b).rho, float(np.corrcoef(rx, ry)[0, 1]), rtol=0, atol=1e-12)
    flat = spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])  # a constant variable: no correlation to speak of
    assert math.isnan(flat.rho) and flat.p_below == 1.0
    with pytest.raises(ValueError, match="one length"):
        spearman([1.0, 2.0], [1.0])


def test_spearman_within_strata_moves_whole_units():
    """Units measured in several strata (a sweep's schemes at two widths): the rank correlation within each stratum,
    averaged, and a permutation p that reassigns whole units. With one stratum it is spearman's; with a stratum
    trend that runs against the units' order (both x and y rise within every unit) the within-stratum rho keeps the
    units' order only."""
    one = {(u, 64): (x, y) for u, x, y in zip("abcde", [1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 1.0, 4.0, 3.0, 5.0])}
    r, plain = spearman_within(one), spearman([1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 1.0, 4.0, 3.0, 5.0])
    assert (r.rho, r.p_below, r.n, r.permutations) == pytest.approx((plain.rho, plain.p_below, 5, 120))
    # four units whose y falls as x rises (rho -1 in each stratum), and every unit's x and y 10x larger at 128: the
    # pooled correlation over the 8 cells is dragged up by the stratum trend, the within-stratum one is not
    x = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}
    cells = {(u, w): (x[u] * k, (5 - x[u]) * k) for u in x for w, k in ((64, 1.0), (128, 10.0))}
    within = spearman_within(cells)
    assert within.rho == pytest.approx(-1.0) and within.p_below == pytest.approx(1 / 24) and within.exact
    pooled = spearman([v[0] for v in cells.values()], [v[1] for v in cells.values()])
    assert pooled.rho > -0.7  # the trend of the strata mixed in
    # a unit missing a stratum is left out; a constant stratum adds nothing; non-finite is an error
    assert spearman_within({**cells, ("e", 64): (9.0, 0.1)}).n == 4
    assert math.isnan(spearman_within({(u, 64): (1.0, x[u]) for u in x}).rho)
    with pytest.raises(ValueError, match="non-finite"):
        spearman_within({**cells, ("a", 64): (math.nan, 1.0)})
    with pytest.raises(ValueError, match="non-finite"):
        spearman([1.0, 2.0, math.inf], [1.0, 2.0, 3.0])


def test_accuracy():
    assert accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == 0.5
    with pytest.raises(ValueError):
        accuracy([1], [1, 0])


def test_unigram_entropy_and_majority_share():
    from normlab.metrics import majority_share, unigram_entropy

    torch.testing.assert_close(unigram_entropy([5, 5, 7, 7]), math.log(2))
    torch.testing.assert_close(unigram_entropy(np.array([3] * 9 + [4])), -(0.9 * math.log(0.9) + 0.1 * math.log(0.1)))
    assert unigram_entropy([1, 1, 1]) == 0.0
    # against a reference: the cross-entropy of its add-1/2 frequencies; a reference equal to the tokens' own
    # distribution gives (about) their entropy, a different one more
    torch.testing.assert_close(unigram_entropy([5, 7], reference=[5, 7] * 1000), math.log(2), rtol=1e-3, atol=0)
    q5, q7 = 1000.5 / 1101.0, 100.5 / 1101.0  # reference 1000 x 5, 100 x 7
    torch.testing.assert_close(unigram_entropy([5, 7], reference=[5] * 1000 + [7] * 100),
                               -(math.log(q5) + math.log(q7)) / 2)
    assert majority_share([0, 1, 1, 1]) == 0.75
    from normlab.metrics import masked_lm_unigram_loss

    torch.testing.assert_close(masked_lm_unigram_loss(7.0), 0.9 * 7.0 + 0.2 * math.log(2))
    assert masked_lm_unigram_loss(7.0, mask=1.0, random=0.0, keep=0.0) == 7.0
    with pytest.raises(ValueError):
        unigram_entropy([])


def test_unigram_plateau_is_the_one_gate_of_reproduce_and_sweep():
    """metrics.unigram_plateau: U against the training frequencies, the plug-in entropy beside it, and for the
    masked LM the copy-aware value with the all-masked one kept."""
    from normlab.metrics import unigram_plateau

    valid, train = [5, 7, 7, 9], [5] * 50 + [7] * 30 + [9] * 20
    p = unigram_plateau(valid, train)
    # by hand: the training frequencies add-1/2 smoothed over the 3 ids seen, q = (50.5, 30.5, 20.5) / 101.5,
    # on the validation tokens 5, 7, 7, 9
    u = -(math.log(50.5 / 101.5) + 2 * math.log(30.5 / 101.5) + math.log(20.5 / 101.5)) / 4
    torch.testing.assert_close(p["unigram_loss"], u)
    torch.testing.assert_close(p["unigram_loss"], 1.1756, rtol=0, atol=1e-4)
    # the validation tokens' own frequencies (1/4, 1/2, 1/4): 1.5 ln 2
    torch.testing.assert_close(p["plugin_entropy"], 1.5 * math.log(2))
    assert p["tokens"] == 4 and "unigram_loss_all_masked" not in p and "token frequencies" in p["what"]
    m = unigram_plateau(valid, train, masked_lm=True)
    torch.testing.assert_close(m["unigram_loss_all_masked"], u)
    # 80/10/10: 0.8 u at [MASK], 0.1 (-ln 1/2) where the token is kept, 0.1 (u - ln 1/2) where it is replaced
    torch.testing.assert_close(m["unigram_loss"], 0.8 * u + 0.1 * math.log(2) + 0.1 * (u + math.log(2)))
    torch.testing.assert_close(m["unigram_loss"], 1.1967, rtol=0, atol=1e-4)
    assert "[MASK]" in m["what"]


def test_the_gates_tokens_are_the_validation_losss_tokens(small_translation):
    """report/claims.py compares a run's validation NLL (summed over the batches' target tokens and divided by
    their count, train/trainer.py evaluate) with the unigram loss of ``all_targets()``: the same tokens."""
    from normlab.data import EOS, PAD
    from normlab.metrics import unigram_entropy

    valid = small_translation.splits["valid"]
    targets = valid.all_targets()
    plan = valid.epoch_batches(0, 1, 512, shuffle=False)
    batches = [valid.collate(idx) for idx in plan]
    assert sum(b.n_tokens for b in batches) == targets.size
    seen = np.concatenate([b.tgt_out[b.tgt_out != PAD].numpy() for b in batches])
    np.testing.assert_array_equal(np.sort(seen), np.sort(targets))
    assert (targets == EOS).sum() == len(valid)
    # the loss of the frequencies alone, computed by hand from the same tokens
    train = small_translation.splits["train"].all_targets()
    q = np.bincount(train, minlength=targets.max() + 1).astype(float)
    q += 0.5 * ((q > 0) | (np.bincount(targets, minlength=q.size) > 0))
    q /= q.sum()
    torch.testing.assert_close(unigram_entropy(targets, train), float(-np.log(q[targets]).mean()))

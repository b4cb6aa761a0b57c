"""The figures of ``normlab analyze`` (matplotlib, Agg backend), laid out like the paper's panels.

* ``figure3ab.png``: (a) W^1 and (b) W^2 of the FFN sub-layers: the scale of the expected gradient per layer,
  encoder layers then decoder layers, for Post-LN, Pre-LN and (when a checkpoint was given) Post-LN after
  warm-up. Log scale: the Post-LN and Pre-LN values differ by orders of magnitude near the output.
* ``figure3cd.png``: ||dL/dW^{2,L}||_F of the last FFN layer against the model size (6-6 ... 14-14), mean and
  standard deviation over seeds, (c) Post-LN and (d) Pre-LN, encoder and decoder in each, with the fitted
  log-log slope (mean of the per-seed slopes ± its standard error). (The paper's caption does not say which stack its panels show; both are drawn.)
  One panel per scheme of the depth scan (``AnalysisConfig.schemes``), four to a row; the default is the paper's two.
* ``lemma2.png``: E||x^{post,5}_l||^2/d against 3/2, and E||x^{pre}_l||^2/d between its bounds.
* ``lemma3.png``: ||J_LN(x)||_2 against sqrt(d)/||x||_2 (log-log) with the fitted line.
* ``concentration.png``: the measured delta per layer at eps = 0.1 against the paper's 0.125.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

__all__ = ["write_figures"]

COLORS = {"post": "tab:blue", "pre": "tab:orange", "post_warmup": "tab:green"}
LABELS = {"post": "Post-LN (init)", "pre": "Pre-LN (init)", "post_warmup": "Post-LN (after warm-up)"}


def _save(fig: Any, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def figure3ab(result: dict[str, Any], path: Path) -> str:
    ab = result["figure3ab"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, which, title in zip(axes, ("w1", "w2"), ("(a) W$^1$ in the FFN sub-layers", "(b) W$^2$ in the FFN sub-layers")):
        n_enc = None
        for key in ("post", "pre", "post_warmup"):
            res = ab.get(key)
            if not res:
                continue
            enc, dec = res["expected"]["encoder"][which], res["expected"]["decoder"][which]
            n_enc = len(enc)
            ax.plot(range(1, len(enc) + 1), enc, "o-", color=COLORS[key], label=LABELS[key])
            ax.plot(range(len(enc) + 1, len(enc) + len(dec) + 1), dec, "s--", color=COLORS[key])
        if n_enc:
            ax.axvline(n_enc + 0.5, color="grey", lw=0.8)
            ax.set_xticks(range(1, 2 * n_enc + 1), [f"E{i}" for i in range(1, n_enc + 1)] + [f"D{i}" for i in range(1, n_enc + 1)])
        ax.set_yscale("log")
        ax.set_xlabel("layer (encoder E, decoder D; input to output)")
        ax.set_ylabel("scale of the expected gradient")
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.suptitle(f"Figure 3(a,b): {ab['layers']}-{ab['layers']} models (at initialisation; after warm-up where given), "
                 f"{ab['post']['n_batches']} batches, {ab['mode']} mode", fontsize=10)
    return _save(fig, path)


def figure3cd(result: dict[str, Any], path: Path) -> str:
    cd = result["figure3cd"]
    depths = cd["depths"]
    schemes = cd.get("schemes", ["post", "pre"])
    titles = {"post": "(c) Post-LN Transformer", "pre": "(d) Pre-LN Transformer"}  # the paper's two panels
    ncols = min(len(schemes), 4)
    nrows = -(-len(schemes) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5 * ncols, 3.8 * nrows), squeeze=False)
    for ax in axes.ravel()[len(schemes):]:
        ax.set_visible(False)
    for ax, scheme in zip(axes.ravel(), schemes):
        for stack, marker in (("encoder", "o-"), ("decoder", "s--")):
            e = cd[scheme][stack]
            if e.get("slope_undefined"):
                label = f"{stack}: log-log slope undefined (zero gradient)"
            else:
                fit = e.get("paired", e["fit"])
                label = f"{stack}: log-log slope {fit['slope']:.2f} ± {fit['stderr']:.2f}"
            ax.errorbar(depths, e["mean"], yerr=e["std"], fmt=marker, capsize=3, label=label)
        ax.set_xticks(depths, [f"{d}-{d}" for d in depths])
        ax.set_xlabel("model size")
        ax.set_ylabel(r"$\|\partial L / \partial W^{2,L}\|_F$")
        theory = cd["theory_slope"].get(scheme)
        ax.set_title(titles.get(scheme, scheme) + ("" if theory is None else f" (Theorem 1 slope {theory})"))
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    fig.suptitle(f"Figure 3(c,d): last FFN layer at initialisation, mean ± sd over {len(cd['seeds'])} seeds", fontsize=10)
    return _save(fig, path)


def lemma2(result: dict[str, Any], path: Path) -> str:
    th, real = result["lemma2"]["theory"], result["lemma2"]["real"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    ax = axes[0]
    ax.plot(th["post"]["layers"], th["post"]["mean"], "o-", label="theory setting")
    for stack, m in (("encoder", "s--"), ("decoder", "^:")):
        e = real["post"][stack]["x5"]
        ax.plot(e["layers"], e["mean"], m, label=f"real {stack}")
    ax.axhline(1.5, color="k", lw=1, label="Lemma 2: 3/2")
    ax.set_xlabel("layer l")
    ax.set_ylabel(r"$E\|x^{post,5}_l\|^2 / d$")
    ax.set_title("Post-LN")
    ax.set_ylim(0, max(2.0, ax.get_ylim()[1]))
    ax.legend(fontsize=8)
    ax = axes[1]
    t = th["pre"]
    ax.fill_between(t["layers"], t["lower"], t["upper"], color="grey", alpha=0.25, label="Lemma 2 bounds")
    ax.plot(t["layers"], t["mean"], "o-", label="theory setting")
    for stack, m in (("encoder", "s--"), ("decoder", "^:")):
        e = real["pre"][stack]["stream"]
        line = ax.plot(e["layers"], e["mean"], m, label=f"real {stack}")[0]
        if "upper_from_measured_input" in e:  # the bounds started from the measured input norm
            ax.plot(e["layers"], e["lower_from_measured_input"], lw=0.8, ls=":", color=line.get_color())
            ax.plot(e["layers"], e["upper_from_measured_input"], lw=0.8, ls=":", color=line.get_color())
    ax.set_xlabel("layers applied l (0 = input)")
    ax.set_ylabel(r"$E\|x^{pre}_l\|^2 / d$")
    ax.set_title("Pre-LN (dotted: real models' bounds from their input norm)", fontsize=10)
    ax.legend(fontsize=8)
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle("Lemma 2: hidden-state norms at initialisation", fontsize=10)
    return _save(fig, path)


def lemma3(result: dict[str, Any], path: Path) -> str:
    l3 = result["lemma3"]
    fig, ax = plt.subplots(figsize=(5, 4))
    lo, hi = float("inf"), 0.0
    for family, f in l3["families"].items():
        ax.loglog(f["sqrt_d_over_x_norm"], f["spectral_norm"], "o", ms=4, label=f"{family} inputs (C = {f['fitted_constant']:.3f})")
        lo, hi = min(lo, *f["sqrt_d_over_x_norm"]), max(hi, *f["sqrt_d_over_x_norm"])
    ax.loglog([lo, hi], [l3["fitted_constant"] * lo, l3["fitted_constant"] * hi], "k-", lw=1,
              label=f"fit C sqrt(d)/||x||, C = {l3['fitted_constant']:.3f}")
    ax.set_xlabel(r"$\sqrt{d} / \|x\|_2$")
    ax.set_ylabel(r"$\|J_{LN}(x)\|_2$ (autograd)")
    ax.set_title(f"Lemma 3, d = {l3['d']}")
    ax.legend(fontsize=8)
    return _save(fig, path)


def concentration(result: dict[str, Any], path: Path) -> str:
    conc = result["concentration"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, placement, title in zip(axes, ("post", "pre"), (r"Post-LN $\|x^{post,5}_l\|^2$", r"Pre-LN $\|x^{pre}_l\|^2$")):
        t = conc["theory"][placement]["delta"]
        start = 1 if placement == "post" else 0
        ax.plot(range(start, start + len(t)), t, "o-", label="theory setting")
        for stack, m in (("encoder", "s--"), ("decoder", "^:")):
            r = conc["real"][placement][stack]["delta"]
            ax.plot(range(start, start + len(r)), r, m, label=f"real {stack}")
        ax.axhline(conc["paper_delta"], color="k", lw=1, label=f"paper: delta = {conc['paper_delta']}")
        ax.set_xlabel("layer")
        ax.set_ylabel(f"delta at eps = {conc['epsilon']}")
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.suptitle("Concentration: fraction of positions with (Z - EZ)/EZ > eps", fontsize=10)
    return _save(fig, path)


def write_figures(result: dict[str, Any], out: Path) -> list[str]:
    """Write every figure into ``out``; returns the file names."""
    out = Path(out)
    return [
        figure3ab(result, out / "figure3ab.png"),
        figure3cd(result, out / "figure3cd.png"),
        lemma2(result, out / "lemma2.png"),
        lemma3(result, out / "lemma3.png"),
        concentration(result, out / "concentration.png"),
    ]

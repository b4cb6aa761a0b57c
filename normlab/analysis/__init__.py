"""Analyses of the paper's theory at initialisation: Figure 3 and Theorem 1 (gradients), Lemmas 2-3 and the
concentration property (theory), and a model-agnostic warm-up diagnosis (diagnose)."""

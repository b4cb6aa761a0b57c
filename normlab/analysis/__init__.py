"""Analyses of the paper's theory at initialisation: Figure 3 and Theorem 1 (gradients), Lemmas 2-3 and the
concentration property (theory), ``normlab analyze`` (run, plots), and a model-agnostic warm-up diagnosis
(diagnose)."""

from normlab.analysis.diagnose import Diagnosis, diagnose, diagnose_config
from normlab.analysis.run import AnalysisConfig, analysis_scale, run_analysis

__all__ = ["AnalysisConfig", "analysis_scale", "run_analysis", "Diagnosis", "diagnose", "diagnose_config"]

"""normlab: train and study Transformers by where their LayerNorm sits (Xiong et al., ICML 2020)."""

from normlab.config import ConfigError, ModelConfig, Placement
from normlab.model import MaskedLM, PairClassifier, Seq2Seq, build_model

__version__ = "0.1.0"

__all__ = ["ConfigError", "ModelConfig", "Placement", "Seq2Seq", "MaskedLM", "PairClassifier", "build_model", "__version__"]

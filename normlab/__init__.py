"""normlab: train and study Transformers by where their LayerNorm sits (Xiong et al., ICML 2020)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["ConfigError", "ModelConfig", "Placement", "Seq2Seq", "MaskedLM", "PairClassifier", "build_model",
           "__version__"]

# The re-exports are resolved on first use (PEP 562), not when the package is imported: ``python -m normlab``
# imports this file before its __main__ runs, and __main__ must choose the process's C allocator
# (normlab.allocator) before torch is imported, which normlab.model does (5.7 s of a loaded 2-core CPU's start-up,
# `python -X importtime -c "import normlab"`, would otherwise be paid twice by the re-executed process).
_LAZY = {"ConfigError": "normlab.config", "ModelConfig": "normlab.config", "Placement": "normlab.config",
         "Seq2Seq": "normlab.model", "MaskedLM": "normlab.model", "PairClassifier": "normlab.model",
         "build_model": "normlab.model"}  # fmt: skip

if TYPE_CHECKING:
    from normlab.config import ConfigError, ModelConfig, Placement
    from normlab.model import MaskedLM, PairClassifier, Seq2Seq, build_model


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'normlab' has no attribute {name!r}")

"""tokenstep's engine: llama.cpp and NumPy only, no Textual and no Rich.

Usable from a script::

    from tui.engine import Model, Engine
    eng = Engine(Model())            # the bundled SmolLM2-135M-Instruct
    recs = eng.prefill(eng.vocab.tokenize("The cat sat"))
    rec = eng.step()                 # sample, then decode one token
"""

from .model.context import EngineConfig
from .model.errors import ContextFullError, ModelError, TokenstepError
from .model.model import Model, ModelInfo, default_model_path
from .run.session import Engine
from .run.step import StepRecord
from .sampler.sampling import SamplerSettings

__all__ = [
    "ContextFullError",
    "Engine",
    "EngineConfig",
    "Model",
    "ModelError",
    "ModelInfo",
    "SamplerSettings",
    "StepRecord",
    "TokenstepError",
    "default_model_path",
]

"""The DP-SGD engine: per-example clipping, noise, Poisson lots."""
from .checker import LayerCheck, ModuleCheck, check_module
from .dpsgd import CLIPPINGS, DPSGDEngine, make_clipper
from .hooks import UnsupportedModelError
from .layers import LAYER_RULES, register
from .sampling import PoissonBatchSampler
from .validators import UnsupportedModuleError, check_dp_compatible, register_validator

__all__ = ["LayerCheck", "ModuleCheck", "check_module", "CLIPPINGS", "DPSGDEngine", "make_clipper", "UnsupportedModelError",
           "LAYER_RULES", "register", "PoissonBatchSampler",
           "UnsupportedModuleError", "check_dp_compatible", "register_validator"]

"""torch modules and the skorch net that trains them with DP-SGD."""
from .check import check_module, fix_module
from .dp_modules import DPGRU, DPLSTM, DPRNN, DPMultiheadAttention
from .init import init_parameters, register_init
from .augment import ImageAugmentation
from .modules import MLP, MODULES, GroupNormCNN, SmallCNN, SoftmaxRegression, WSConv2d, module_spec
from .net import DPNet, EpsilonLogger, plan_dpsgd
from ._estimator import DPSGDEstimator, fill_dp_docs
from ._momentum import DPMomentumClassifier, DPMomentumRegressor

__all__ = ["check_module", "fix_module", "DPLSTM", "DPGRU", "DPRNN", "DPMultiheadAttention", "DPMomentumClassifier", "DPMomentumRegressor", "DPSGDEstimator", "fill_dp_docs", "DPNet", "EpsilonLogger", "plan_dpsgd", "MLP", "MODULES", "GroupNormCNN", "ImageAugmentation", "SmallCNN", "SoftmaxRegression", "WSConv2d",
           "module_spec", "init_parameters", "register_init"]

"""torch modules and the skorch net that trains them with DP-SGD."""
from .init import init_parameters, register_init
from .modules import MLP, MODULES, SmallCNN, SoftmaxRegression, module_spec
from .net import DPNet, EpsilonLogger, plan_dpsgd

__all__ = ["DPNet", "EpsilonLogger", "plan_dpsgd", "MLP", "MODULES", "SmallCNN", "SoftmaxRegression",
           "module_spec", "init_parameters", "register_init"]

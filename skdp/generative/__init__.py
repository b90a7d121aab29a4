"""Private generative models: PGE (score matching + Hamiltonian sampling) and train-on-synthetic."""
from .metrics import downstream_accuracy, label_entropy
from .pge import PGEGenerator
from .synthetic import TrainOnSynthetic

__all__ = ["PGEGenerator", "TrainOnSynthetic", "downstream_accuracy", "label_entropy"]

"""Model selection whose choice is itself differentially private."""
from ._private_search import PrivateSearchCV
from ._tuning import random_stopping_epsilon, random_stopping_rdp

__all__ = ["PrivateSearchCV", "random_stopping_epsilon", "random_stopping_rdp"]

"""Checking privacy claims empirically: lower bounds on epsilon from attacks."""
from .distinguish import epsilon_lower_bound

__all__ = ["epsilon_lower_bound"]

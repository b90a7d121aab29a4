"""The extension points of skdp, as ``typing.Protocol`` classes.

Implement one of these to plug your own piece in: a clipper for the DP-SGD
engine, a per-layer rule (registered with ``skdp.engine.register``), a
transformer or classifier that white-box attacks can differentiate through,
or a budget ledger.
"""
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import torch

ClippedSums = list[tuple[torch.nn.Parameter, torch.Tensor]]


@runtime_checkable
class Clipper(Protocol):
    """Per-example clipping for ``DPSGDEngine`` (``HookClipper``, ``FunctionalClipper``)."""

    def clipped_sum(self, per_example_loss: Callable[..., torch.Tensor], inputs: Sequence[torch.Tensor],
                    max_grad_norm: float, probe_inputs: Sequence[torch.Tensor] | None = None,
                    ) -> tuple[torch.Tensor, ClippedSums, torch.Tensor]:
        """Per-example losses, ``[(parameter, sum of clipped per-example gradients)]`` and the norms.

        ``probe_inputs``: the whole lot when ``inputs`` is a piece of it, for checks that need
        several examples (the hook clipper's first-lot probe); a clipper may ignore it.
        """

    def remove(self) -> None:
        """Release hooks or other resources."""


class LayerRule(Protocol):
    """A per-layer rule of the hook clipper (see ``skdp.engine.layers``).

    Given the layer, its input activations ``a`` and the gradient ``g`` of the
    summed per-example losses with respect to its output (both batch first),
    returns the per-example squared gradient norms and a function that maps
    per-example clipping factors to the clipped gradient sums.
    """

    def __call__(self, module: torch.nn.Module, a: torch.Tensor, g: torch.Tensor
                 ) -> tuple[torch.Tensor, Callable[[torch.Tensor], ClippedSums]]: ...


@runtime_checkable
class TorchTransformer(Protocol):
    """A fitted transformer with a differentiable torch path (for white-box attacks)."""

    def torch_transform(self, x: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class TorchClassifier(Protocol):
    """A fitted classifier with differentiable class probabilities (for white-box attacks)."""

    def torch_predict_proba(self, x: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class Ledger(Protocol):
    """What estimators need of a budget ledger (``skdp.BudgetLedger``)."""

    def spend(self, epsilon: float, delta: float, label: str = "") -> Any: ...

"""Which clipping path each layer of a module takes, or why the module is refused.

One home for the module checks an engine runs before the first clipped step
(and so before a fit charges any budget):

- module-level refusals from the validator registry (``validators``): BatchNorm
  in train mode mixes the examples of a lot; InstanceNorm with running
  statistics stores the data without noise. No clipping fixes these.
- per layer with trainable parameters, the path it takes: ``"rule"`` (skdp's own
  per-layer rule), ``"opacus"`` (an Opacus grad sampler, through the same hooks)
  or ``"vmap"`` (torch.func per-example gradients: exact, slow). Tied
  parameters, parameters a rule does not cover and a forward replaced on the
  instance send the layer to ``"vmap"`` (under ``clipping="ghost"`` they are
  refused, with the reason).

A layer called several times per forward without a stacking rule, or run
time-major, is found only at run time by the hooks (``clipping="auto"`` then
switches to vmap); the checker cannot see it from the module alone.
"""
from dataclasses import dataclass

from ..exceptions import UnsupportedModelError, UnsupportedModuleError
from .layers import lookup, uncovered_params
from .validators import _validator

_GHOST_FIX = "use clipping='auto' (or 'vmap'), which takes the exact torch.func path for it"


@dataclass(frozen=True)
class LayerCheck:
    """One line of a ``ModuleCheck``: a layer's path, or why it is refused, with the fix."""
    name: str
    kind: str
    path: str       # "rule", "opacus", "vmap" or "refused"
    reason: str = ""

    def __str__(self):
        line = f"{self.name or '<root>'} ({self.kind}): {self.path}"
        return f"{line} - {self.reason}" if self.reason else line


class ModuleCheck(list):
    """The ``LayerCheck`` rows of one module; ``str`` gives a table, ``refusals`` the refused rows."""

    def __init__(self, rows, clipping):
        super().__init__(rows)
        self.clipping = clipping

    @property
    def refusals(self):
        return [row for row in self if row.path == "refused"]

    @property
    def ok(self):
        return not self.refusals

    def paths(self):
        """``{layer name: path}``."""
        return {row.name: row.path for row in self}

    def __str__(self):
        return "\n".join(str(row) for row in self) or "(no layer with trainable parameters)"

    def message(self):
        """One message naming every refused module and its fix (empty when none is refused)."""
        return " ".join(f"Module {row.name or '<root>'!r} ({row.kind}) {row.reason}." for row in self.refusals)

    def raise_if_refused(self):
        """Raise ``UnsupportedModuleError`` (examples mixed, data stored) or ``UnsupportedModelError``
        (``clipping="ghost"`` and a layer without an exact rule) with ``message()``."""
        if not self.refusals:
            return
        if all(row.reason.startswith("(ghost)") for row in self.refusals):
            raise UnsupportedModelError(self.message())
        raise UnsupportedModuleError(self.message())


def check_module(module, clipping="auto"):
    """The path each layer with trainable parameters takes, and module-level refusals.

    See ``skdp.nn.check_module`` for the documented entry point.
    """
    rows = []
    for name, sub in module.named_modules():
        fn = _validator(sub)
        message = fn(sub) if fn is not None else None
        if message:
            rows.append(LayerCheck(name, type(sub).__name__, "refused", message))
    refused = {row.name for row in rows}
    owners = {}
    layers = []
    for name, sub in module.named_modules():
        own = [(n, p) for n, p in sub.named_parameters(recurse=False) if p.requires_grad]
        if not own or name in refused:
            continue
        for _, p in own:
            owners.setdefault(id(p), []).append(name)
        layers.append((name, sub))
    for name, sub in layers:
        kind = type(sub).__name__
        rule = lookup(sub)
        shared = sorted({other for p in sub.parameters(recurse=False) if p.requires_grad
                         for other in owners[id(p)] if other != name})
        if rule is None:
            reason = ("no per-layer rule (register one with skdp.engine.register, or use fix_module for "
                      "BatchNorm/LSTM/GRU/RNN/MultiheadAttention)")
        elif shared:
            reason = (f"shares parameters with {', '.join(map(repr, shared))} (tied weights): per-layer norms "
                      f"would under-count the shared gradient")
        elif uncovered_params(sub, rule):
            reason = (f"trainable parameter(s) {uncovered_params(sub, rule)} not covered by its rule (it "
                      f"accounts for {rule.params}); move them to a module with a rule")
        elif "forward" in vars(sub):
            reason = f"forward replaced on the instance; the rule assumes {kind}.forward"
        else:
            rows.append(LayerCheck(name, kind, rule.path, "" if rule.path == "rule" else
                                   "per-example gradients from Opacus's registered grad sampler"))
            continue
        if clipping == "ghost":
            rows.append(LayerCheck(name, kind, "refused", f"(ghost) {reason}; {_GHOST_FIX}"))
        else:
            rows.append(LayerCheck(name, kind, "vmap", f"{reason}; exact by torch.func, slower"))
    if clipping == "vmap":
        rows = [row if row.path == "refused" else LayerCheck(row.name, row.kind, "vmap", "clipping='vmap'")
                for row in rows]
    return ModuleCheck(rows, clipping)

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
import torch

from ..exceptions import UnsupportedModelError, UnsupportedModuleError
from .layers import lookup, uncovered_params
from .validators import _validator

_GHOST_FIX = "use clipping='auto' (or 'vmap'), which takes the exact torch.func path for it"


@dataclass(frozen=True)
class LayerCheck:
    """One line of a ``ModuleCheck``: a layer's path, or why it is refused, with the fix.

    ``str`` gives the line as the table of :func:`check_module` prints it:
    ``name (kind): path``, then a dash and the reason when there is one.

    Parameters
    ----------
    name : str
        The module's name in ``named_modules()`` (``""`` for the root, printed
        ``<root>``).
    kind : str
        The module's class name.
    path : {"rule", "opacus", "vmap", "refused"}
        How its per-example gradients are clipped: skdp's per-layer rule
        (exact, fast), an Opacus grad sampler through the same hooks, torch.func
        per-example gradients (exact, slower), or not at all: the module is
        refused.
    reason : str, default=""
        Why the layer takes ``"vmap"`` or ``"opacus"``, or why it is refused
        and how to fix it.

    See Also
    --------
    ModuleCheck : The rows of one module together.
    check_module : The check that builds them.

    Examples
    --------
    >>> from skdp.engine import LayerCheck
    >>> print(LayerCheck("0", "Linear", "rule"))
    0 (Linear): rule
    >>> LayerCheck("", "Bilinear", "vmap", "no per-layer rule").path
    'vmap'
    """
    name: str
    kind: str
    path: str       # "rule", "opacus", "vmap" or "refused"
    reason: str = ""

    def __str__(self):
        line = f"{self.name or '<root>'} ({self.kind}): {self.path}"
        return f"{line} - {self.reason}" if self.reason else line


class ModuleCheck(list):
    """The ``LayerCheck`` rows of one module; ``str`` gives a table, ``refusals`` the refused rows.

    A list, so it indexes and iterates as one: one row per module with
    trainable parameters (its clipping path) and one per module refused
    outright (BatchNorm in train mode, running statistics of the data). An
    engine raises with :meth:`message` when any row is refused, before any
    budget is charged.

    Parameters
    ----------
    rows : iterable of LayerCheck
        The rows, in the order of ``named_modules()`` (module-level refusals
        first).
    clipping : {"auto", "ghost", "vmap"}
        The clipping method the rows were computed for.

    Attributes
    ----------
    clipping : str
        The clipping method the rows were computed for.

    See Also
    --------
    check_module : Build the report of a module.
    LayerCheck : One row.
    skdp.nn.check_module : The documented entry point, which can print the table.

    Examples
    --------
    >>> from torch import nn
    >>> from skdp.engine import check_module
    >>> report = check_module(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)))
    >>> print(report)
    0 (Linear): rule
    2 (Linear): rule
    >>> report.ok, report.paths()
    (True, {'0': 'rule', '2': 'rule'})
    """

    def __init__(self, rows, clipping):
        super().__init__(rows)
        self.clipping = clipping

    @property
    def refusals(self):
        """The rows whose path is ``"refused"`` (an empty list when none is), as a list of ``LayerCheck``."""
        return [row for row in self if row.path == "refused"]

    @property
    def ok(self):
        """Whether no row is refused: a fit on this module would start (a bool)."""
        return not self.refusals

    def paths(self):
        """Map each row's module name to its path.

        Returns
        -------
        paths : dict of str to str
            ``{name: path}``, path one of "rule", "opacus", "vmap" and
            "refused" (the root's name is ``""``).
        """
        return {row.name: row.path for row in self}

    def __str__(self):
        return "\n".join(str(row) for row in self) or "(no layer with trainable parameters)"

    def message(self):
        """Name every refused module and its fix, in one message.

        Returns
        -------
        message : str
            One sentence per refused module (``Module 'name' (kind) reason.``),
            joined by spaces; empty when none is refused.
        """
        return " ".join(f"Module {row.name or '<root>'!r} ({row.kind}) {row.reason}." for row in self.refusals)

    def raise_if_refused(self):
        """Raise with :meth:`message` when a row is refused; do nothing otherwise.

        Raises
        ------
        UnsupportedModelError
            When every refusal is a ``clipping="ghost"`` one (a layer without
            an exact per-layer rule): ``clipping="auto"`` or ``"vmap"`` fixes it.
        UnsupportedModuleError
            Otherwise: a module DP-SGD cannot train privately whatever the
            clipping (examples mixed, data stored in buffers without noise).
        """
        if not self.refusals:
            return
        if all(row.reason.startswith("(ghost)") for row in self.refusals):
            raise UnsupportedModelError(self.message())
        raise UnsupportedModuleError(self.message())


#: The dtypes a trainable parameter may have: the rules, the clipping and the real Gaussian noise are exact only
#: for these (half precision rounded a record's contribution past the bound, 1.008 C in bfloat16: review s38b F-B;
#: an allow-list, since float8 came through the earlier list of refused dtypes: review s39 F1).
_TRAINABLE_DTYPES = (torch.float32, torch.float64)


def _dtype_refusal(params):
    """Why ``params`` cannot be trained privately in their dtypes (a sentence), or "" when they can.

    Half precision rounds a record's contribution past the clipping bound (review s38b F-B); float8 does more.
    Complex parameters have no clipping rule and the noise is real Gaussian (they crashed inside the first lot
    before, as float8 did: reviews s38c, s39 F1). float32 and float64 together: the per-layer norms, the
    clipping factors and the sums run in one dtype (a mixed model crashed inside the first lot: review s39b G2).
    """
    dtypes = sorted({str(p.dtype) for p in params if p.requires_grad})
    bad = [d for d in dtypes if d not in _TRAINABLE_NAMES]
    if bad:
        return (f"trains parameters in {', '.join(bad)}: per-example clipping and noise are exact only for real "
                "float32 or float64 parameters (half or 8-bit precision rounds a record's contribution past the "
                "clipping bound; a complex gradient has no clipping rule, and the noise is real); train in float32 "
                "(model.float()), with a complex parameter kept as two real ones (torch.complex(re, im) in the "
                "forward)")
    if len(dtypes) > 1:
        return (f"trains parameters in {' and '.join(dtypes)} together: the per-example norms, the clipping and "
                "the noise run in one dtype; convert the whole model to one (model.float() or model.double())")
    return ""


_TRAINABLE_NAMES = frozenset(str(d) for d in _TRAINABLE_DTYPES)


def check_precision(module):
    """Raise ``UnsupportedModuleError`` when ``module`` trains parameters in a dtype other than float32 or float64
    (half precision, float8, complex), or in both of those.

    ``check_module`` refuses them before the first clipped step; the clippers also call this on every lot, since
    a model converted after that check (``model.to(torch.bfloat16)``) would otherwise train and release
    (review s38c G1).
    """
    low = _dtype_refusal(module.parameters())
    if low:
        raise UnsupportedModuleError(f"The module {low}.")


def check_module(module, clipping="auto"):
    """Find the clipping path of each layer with trainable parameters, and the refused modules.

    The check every engine runs before its first clipped step, and so before
    a fit charges any budget. Module-level refusals come from the validators
    (``register_validator``): modules that mix the examples of a lot or
    store data without noise, which no clipping fixes. Each other layer with
    trainable parameters takes skdp's per-layer rule, an Opacus grad sampler
    or, when neither covers it exactly (no rule, tied weights, parameters the
    rule does not cover, a forward replaced on the instance), the exact vmap
    path; under ``clipping="ghost"`` such a layer is refused instead. A layer
    called twice per forward, or run time-major, shows only at run time (the
    hooks then raise, and ``clipping="auto"`` switches to vmap).

    Parameters
    ----------
    module : torch.nn.Module
        The model, in the train/eval modes it will be trained in.
    clipping : {"auto", "ghost", "vmap"}, default="auto"
        The clipping method: under "ghost" a layer without an exact rule is
        refused; under "vmap" every layer takes the vmap path.

    Returns
    -------
    report : ModuleCheck
        The rows, one per layer with trainable parameters and one per
        refused module.

    See Also
    --------
    skdp.nn.check_module : The documented entry point, which can print the table.
    skdp.nn.fix_module : Swap the usual refused layers for DP-compatible ones.
    check_dp_compatible : Raise for the module-level refusals only.

    Examples
    --------
    >>> from torch import nn
    >>> from skdp.engine import check_module
    >>> model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Bilinear(8, 8, 2))
    >>> check_module(model).paths()
    {'1': 'refused', '0': 'rule', '2': 'vmap'}
    >>> check_module(model, clipping="ghost").paths()
    {'1': 'refused', '0': 'rule', '2': 'refused'}
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
    # Layers in float32 beside layers in float64: refused for the whole model (each layer alone is fine), in the
    # root's row "", the one name no submodule can take (its own layer row when it has parameters: one row a name,
    # reviews s39c H1, s39d K2/K3).
    own = {name: _dtype_refusal(sub.parameters(recurse=False)) for name, sub in layers}
    # (a layer's own refusal names its dtypes first)
    mixed = "" if any(own.values()) else _dtype_refusal(p for _, sub in layers for p in sub.parameters(recurse=False))
    if mixed and "" in refused:  # the root is refused already (a validator): its row names the dtypes too
        rows = [LayerCheck("", r.kind, "refused", f"{r.reason}; it also {mixed}") if r.name == "" else r
                for r in rows]
    elif mixed and all(name for name, _ in layers):
        rows.append(LayerCheck("", type(module).__name__, "refused", mixed))
    for name, sub in layers:
        kind = type(sub).__name__
        low = own[name] or (mixed if name == "" else "")
        if low:
            rows.append(LayerCheck(name, kind, "refused", low))
            continue
        rule = lookup(sub)
        shared = sorted({other for p in sub.parameters(recurse=False) if p.requires_grad
                         for other in owners[id(p)] if other != name})
        if rule is None:
            reason = ("no per-layer rule (register one with skdp.engine.register, or use fix_module for "
                      "BatchNorm/LSTM/GRU/RNN/MultiheadAttention)")
        elif shared:
            # Each layer's rule sees its own share g_j of the parameter's gradient; the norms would add as
            # sum_j ||g_j||^2 while the clipped gradients add into one parameter, ||sum_j g_j||^2 <=
            # k sum_j ||g_j||^2: under-clipped by up to sqrt(k).
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

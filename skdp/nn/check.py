"""``check_module`` and ``fix_module``: what DP-SGD will do with a torch model, and the usual fixes."""
import copy

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from ..engine import checker
from .dp_modules import DPGRU, DPLSTM, DPRNN, DPMultiheadAttention


def check_module(module, clipping="auto", verbose=False):
    """Say which clipping path each layer takes, or why the module is refused.

    The estimators run the same check when a fit starts, before any privacy
    budget is charged, and raise with ``.message()`` when something is refused.

    Parameters
    ----------
    module : torch.nn.Module
        The model, in the train/eval modes it will be trained in.
    clipping : {"auto", "ghost", "vmap"}, default="auto"
        The estimator's ``clipping``. Under "ghost", layers without an exact
        per-layer rule are refused instead of taking the vmap path.
    verbose : bool, default=False
        Print the table as well.

    Returns
    -------
    report : skdp.engine.ModuleCheck
        A list of ``LayerCheck(name, kind, path, reason)``, one per module with
        trainable parameters and one per refused module. ``path`` is "rule"
        (skdp's per-layer rule: fast, exact), "opacus" (an Opacus grad sampler
        through the same hooks), "vmap" (torch.func per-example gradients:
        exact, slower; ``reason`` says why) or "refused" (``reason`` names the
        problem and its fix). ``report.ok`` is False when something is refused;
        ``report.paths()`` maps names to paths; ``str(report)`` is a table.

    See Also
    --------
    fix_module : Swap the usual refused layers for DP-compatible ones.
    skdp.engine.check_module : The same check, without printing.
    skdp.engine.register : Add a per-layer rule, so a layer takes the "rule" path.

    Examples
    --------
    >>> from torch import nn
    >>> from skdp.nn import check_module
    >>> report = check_module(nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)))
    >>> report.ok, report.paths()
    (False, {'1': 'refused', '0': 'rule', '2': 'rule'})
    >>> print(report.refusals[0].reason.split(";")[0])
    mixes the examples of a lot: in train mode it normalises by the lot's mean and variance and stores running statistics without noise
    """
    report = checker.check_module(module, clipping)
    if verbose:
        print(report)
    return report


def _batch_norm_to_group_norm(bn):
    C = bn.num_features
    if isinstance(bn, (nn.BatchNorm2d, nn.BatchNorm3d)):
        # Opacus's ModuleValidator.fix rule: the largest divisor of C up to 32 (the spatial dims give
        # each group many values).
        groups = max(g for g in range(1, min(32, C) + 1) if C % g == 0)
    else:
        # BatchNorm1d and SyncBatchNorm may see (N, C) rows: C groups would normalise single values
        # (always 0, and an error for one example). One group normalises each example over its channels.
        groups = 1
    like = next((t for t in (bn.weight, bn.running_mean) if t is not None), None)
    gn = nn.GroupNorm(groups, C, eps=bn.eps, affine=bn.affine)
    return gn if like is None else gn.to(device=like.device, dtype=like.dtype)


def _recurrent(dp_class):
    def swap(m):
        kwargs = dict(num_layers=m.num_layers, bias=m.bias, batch_first=m.batch_first, dropout=m.dropout,
                      bidirectional=m.bidirectional)
        if isinstance(m, nn.RNN):
            kwargs["nonlinearity"] = m.nonlinearity
        if getattr(m, "proj_size", 0):
            return None
        return dp_class(m.input_size, m.hidden_size, **kwargs).to(m.weight_ih_l0).load_torch_weights(m)
    return swap


def _attention(m):
    if m.bias_k is not None:
        return None  # add_bias_kv: left for the vmap path
    bias = m.in_proj_bias is not None
    new = DPMultiheadAttention(m.embed_dim, m.num_heads, dropout=m.dropout, bias=bias, add_zero_attn=m.add_zero_attn,
                               kdim=m.kdim, vdim=m.vdim, batch_first=m.batch_first)
    return new.to(m.out_proj.weight).load_torch_weights(m)


#: Exact type -> ``swap(module) -> replacement or None`` (None: left as it is).
FIXES = {nn.LSTM: _recurrent(DPLSTM), nn.GRU: _recurrent(DPGRU), nn.RNN: _recurrent(DPRNN),
         nn.MultiheadAttention: _attention}


def _fix_for(module):
    if isinstance(module, _BatchNorm):  # BatchNorm1d/2d/3d, SyncBatchNorm
        return _batch_norm_to_group_norm
    return FIXES.get(type(module))


def fix_module(module):
    """A copy of ``module`` with the layers DP-SGD refuses or cannot hook replaced.

    - BatchNorm2d/3d -> GroupNorm with the largest divisor of the channels
      up to 32 as groups (as Opacus's ``ModuleValidator.fix``); BatchNorm1d and
      SyncBatchNorm -> GroupNorm with one group (it often sees ``(N, C)`` rows, where C groups
      would normalise single values to 0). The running statistics are
      dropped (GroupNorm normalises each example on its own).
      The function changes: retrain, or fine-tune, after the swap.
    - nn.LSTM / nn.GRU / nn.RNN -> ``DPLSTM`` / ``DPGRU`` / ``DPRNN`` with the
      weights copied: same outputs, exact per-layer clipping.
    - nn.MultiheadAttention (also inside nn.TransformerEncoderLayer) ->
      ``DPMultiheadAttention`` with the weights copied: same outputs.

    Parameters
    ----------
    module : torch.nn.Module
        The model; it is not modified.

    Returns
    -------
    fixed : torch.nn.Module
        A deep copy with the swaps made (the root itself is swapped when it is one of these layers).

    See Also
    --------
    check_module : See what DP-SGD will do with a module, before or after the fix.
    DPLSTM : The drop-in for ``nn.LSTM``.
    DPMultiheadAttention : The drop-in for ``nn.MultiheadAttention``.
    skdp.engine.check_module : The check the engine runs before a fit.

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> from skdp.nn import check_module, fix_module
    >>> model = nn.Sequential(nn.Conv1d(2, 4, 3), nn.BatchNorm1d(4))
    >>> fixed = fix_module(model)
    >>> type(fixed[1]).__name__, check_module(fixed).ok
    ('GroupNorm', True)
    >>> lstm = nn.LSTM(3, 5, batch_first=True)
    >>> x = torch.randn(2, 4, 3)
    >>> torch.allclose(lstm(x)[0], fix_module(lstm)(x)[0], atol=1e-6)
    True
    """
    return _fix_in_place(copy.deepcopy(module))


def _fix_in_place(module):
    fix = _fix_for(module)
    if fix is not None:
        new = fix(module)
        return module if new is None else new.train(module.training)
    for name, child in list(module.named_children()):
        setattr(module, name, _fix_in_place(child))
    return module

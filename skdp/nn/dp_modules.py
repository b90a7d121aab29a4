"""DP-compatible drop-ins for torch layers the per-layer rules cannot hook.

``nn.LSTM``/``nn.GRU``/``nn.RNN`` run their time loop inside one fused kernel,
and ``nn.MultiheadAttention`` projects query, key and value with one fused
``in_proj_weight`` inside ``F.multi_head_attention_forward``: no hook sees the
per-call input and output of a weight. The drop-ins below compute the same
functions from ``nn.Linear`` layers, which the Linear rule clips exactly:

- recurrent: per layer and direction, ``ih`` maps the whole sequence at once
  (one call on ``(B, T, in)``) and ``hh`` is called once per time step. The
  per-example gradient of ``hh.weight`` is ``sum_t g_t h_{t-1}^T``; the hooks
  stack the T calls along a token axis and the 3-D Linear rule computes the
  norm of that sum exactly (ghost norm or per-example gradient, whichever is
  cheaper).
- attention: ``q_proj``, ``k_proj``, ``v_proj`` and ``out_proj``, each called once.

Every hooked layer sees the examples first, whatever ``batch_first`` says: the
drop-ins transpose time-major inputs before the first Linear.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


class DPRNNCell(nn.Module):
    """The two Linear maps of one recurrent layer and direction: ``ih`` (input) and ``hh`` (hidden)."""

    def __init__(self, input_size, hidden_size, gates, bias=True):
        super().__init__()
        self.ih = nn.Linear(input_size, gates * hidden_size, bias=bias)
        self.hh = nn.Linear(hidden_size, gates * hidden_size, bias=bias)


def _lstm_step(cell, xi, state):
    h, c = state
    # chunk, not slices: its backward is one cat, where each slice's backward fills a zero tensor.
    i, f, g, o = (xi + cell.hh(h)).chunk(4, 1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    h = torch.sigmoid(o) * torch.tanh(c)
    return h, (h, c)


def _gru_step(cell, xi, h):
    # torch's GRU: n = tanh(W_in x + b_in + r * (W_hn h + b_hn)); hh's bias holds b_hn, inside r * (...).
    xr, xz, xn = xi.chunk(3, 1)
    hr, hz, hn = cell.hh(h).chunk(3, 1)
    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
    n = torch.tanh(xn + r * hn)
    h = (1 - z) * n + z * h
    return h, h


def _rnn_tanh_step(cell, xi, h):
    h = torch.tanh(xi + cell.hh(h))
    return h, h


def _rnn_relu_step(cell, xi, h):
    h = torch.relu(xi + cell.hh(h))
    return h, h


_STEPS = {"LSTM": _lstm_step, "GRU": _gru_step, "RNN_TANH": _rnn_tanh_step, "RNN_RELU": _rnn_relu_step}


class _DPRNNBase(nn.Module):
    mode = None

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0):
        super().__init__()
        if proj_size:
            raise ValueError(f"{type(self).__name__} does not implement proj_size; use proj_size=0.")
        if not 0 <= float(dropout) <= 1:
            raise ValueError(f"dropout must be in [0, 1], got {dropout!r}.")
        self.mode = mode
        self.input_size, self.hidden_size, self.num_layers = int(input_size), int(hidden_size), int(num_layers)
        self.bias, self.batch_first, self.dropout = bool(bias), bool(batch_first), float(dropout)
        self.bidirectional = bool(bidirectional)
        self.proj_size = 0
        directions = 2 if bidirectional else 1
        gates = _GATES[mode]
        self.cells = nn.ModuleList(
            DPRNNCell(input_size if layer == 0 else hidden_size * directions, hidden_size, gates, bias)
            for layer in range(num_layers) for _ in range(directions))
        self.reset_parameters()

    def reset_parameters(self):
        """torch's initialisation: every weight and bias uniform in +-1/sqrt(hidden_size)."""
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    @property
    def _directions(self):
        return 2 if self.bidirectional else 1

    def _initial_state(self, x, hx):
        B = x.shape[0]
        shape = (self.num_layers * self._directions, B, self.hidden_size)
        if self.mode == "LSTM":
            if hx is None:
                zeros = x.new_zeros(shape)
                return zeros, zeros
            return hx
        return x.new_zeros(shape) if hx is None else hx

    def forward(self, input, hx=None):  # noqa: A002 - torch's name
        """Run the recurrence over a batch of sequences, as the torch module does.

        Parameters
        ----------
        input : torch.Tensor
            ``(T, B, input_size)``, ``(B, T, input_size)`` with
            ``batch_first=True``, or one unbatched sequence ``(T, input_size)``.
            Packed sequences are refused (pad the batch instead).
        hx : torch.Tensor, tuple of torch.Tensor or None, default=None
            Initial hidden state ``(num_layers * directions, B, hidden_size)``
            (LSTM: the pair ``(h_0, c_0)``); None: zeros.

        Returns
        -------
        output : torch.Tensor
            The last layer's hidden state at every time step, in the input's
            layout, ``hidden_size * directions`` features.
        hidden : torch.Tensor or tuple of torch.Tensor
            ``h_n`` at the last step of every layer and direction (LSTM:
            ``(h_n, c_n)``).
        """
        if isinstance(input, nn.utils.rnn.PackedSequence):
            raise TypeError(f"{type(self).__name__} does not take a PackedSequence; pad the batch instead.")
        unbatched = input.dim() == 2
        x = input.unsqueeze(0 if self.batch_first else 1) if unbatched else input
        if unbatched and hx is not None:
            hx = tuple(h.unsqueeze(1) for h in hx) if self.mode == "LSTM" else hx.unsqueeze(1)
        x = x if self.batch_first else x.transpose(0, 1)      # (B, T, features): examples first
        state = self._initial_state(x, hx)
        step = _STEPS[self.mode]
        T = x.shape[1]
        finals_h, finals_c = [], []
        for layer in range(self.num_layers):
            outs = []
            for direction in range(self._directions):
                k = layer * self._directions + direction
                cell = self.cells[k]
                s = (state[0][k], state[1][k]) if self.mode == "LSTM" else state[k]
                # All time steps in one call: (B, T, G*H). unbind, not xi[:, t]: the backward of T slices
                # would allocate T zero tensors of xi's size, the backward of one unbind stacks once.
                xs = cell.ih(x).unbind(1)
                hs = [None] * T
                for t in (range(T - 1, -1, -1) if direction else range(T)):
                    hs[t], s = step(cell, xs[t], s)           # hh: one call per time step
                outs.append(torch.stack(hs, 1))
                if self.mode == "LSTM":
                    finals_h.append(s[0])
                    finals_c.append(s[1])
                else:
                    finals_h.append(s)
            x = outs[0] if len(outs) == 1 else torch.cat(outs, 2)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        output = x if self.batch_first else x.transpose(0, 1)
        h_n = torch.stack(finals_h, 0)
        hidden = (h_n, torch.stack(finals_c, 0)) if self.mode == "LSTM" else h_n
        if unbatched:
            output = output.squeeze(0 if self.batch_first else 1)
            hidden = tuple(h.squeeze(1) for h in hidden) if self.mode == "LSTM" else hidden.squeeze(1)
        return output, hidden

    def load_torch_weights(self, module):
        """Copy the weights of the torch module this drop-in replaces (same sizes).

        ``requires_grad`` is copied too, so frozen weights stay frozen.

        Parameters
        ----------
        module : torch.nn.LSTM, torch.nn.GRU or torch.nn.RNN
            The torch module, of the same kind, sizes and number of layers.

        Returns
        -------
        self : torch.nn.Module
            The drop-in, computing the same function as ``module``.
        """
        for layer in range(self.num_layers):
            for direction in range(self._directions):
                cell = self.cells[layer * self._directions + direction]
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                with torch.no_grad():
                    cell.ih.weight.copy_(getattr(module, "weight_ih" + suffix))
                    cell.hh.weight.copy_(getattr(module, "weight_hh" + suffix))
                    if self.bias:
                        cell.ih.bias.copy_(getattr(module, "bias_ih" + suffix))
                        cell.hh.bias.copy_(getattr(module, "bias_hh" + suffix))
                cell.ih.weight.requires_grad_(getattr(module, "weight_ih" + suffix).requires_grad)
                cell.hh.weight.requires_grad_(getattr(module, "weight_hh" + suffix).requires_grad)
                if self.bias:
                    cell.ih.bias.requires_grad_(getattr(module, "bias_ih" + suffix).requires_grad)
                    cell.hh.bias.requires_grad_(getattr(module, "bias_hh" + suffix).requires_grad)
        return self

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}"
        if self.mode.startswith("RNN_"):
            s += f", nonlinearity={self.mode[4:].lower()!r}"
        return s + (f", bias={self.bias}, batch_first={self.batch_first}, dropout={self.dropout}, "
                    f"bidirectional={self.bidirectional}")


_RNN_PARAMS = """    input_size : int
        Number of features of the input at each time step.
    hidden_size : int
        Number of features of the hidden state.
    num_layers : int, default=1
        Number of stacked recurrent layers.
    bias : bool, default=True
        Whether the input and hidden maps have biases (``b_ih`` and ``b_hh`` as in torch).
    batch_first : bool, default=False
        Input and output as ``(batch, time, features)`` instead of ``(time, batch, features)``. The
        hidden states are ``(num_layers * directions, batch, hidden_size)`` either way, as in torch.
    dropout : float, default=0.0
        Dropout on the outputs of every layer but the last, in training mode.
    bidirectional : bool, default=False
        Run a second direction from the last time step to the first; outputs are concatenated."""


class DPLSTM(_DPRNNBase):
    __doc__ = f"""``nn.LSTM`` built from ``nn.Linear`` layers, for exact per-layer clipping.

    Same constructor, forward and results as ``torch.nn.LSTM`` (``proj_size`` and packed sequences are
    not implemented). ``load_torch_weights(lstm)`` copies an ``nn.LSTM``'s weights;
    ``skdp.nn.fix_module`` swaps every ``nn.LSTM`` of a model for one.

    Parameters
    ----------
{_RNN_PARAMS}
    proj_size : int, default=0
        Must be 0 (projections are not implemented).

    See Also
    --------
    DPGRU : The drop-in for ``nn.GRU``.
    DPRNN : The drop-in for ``nn.RNN``.
    fix_module : Swap every ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` of a model for its drop-in.

    Examples
    --------
    >>> import torch
    >>> from skdp.nn import DPLSTM
    >>> lstm = DPLSTM(28, 32, batch_first=True)
    >>> output, (h_n, c_n) = lstm(torch.zeros(4, 10, 28))
    >>> output.shape, h_n.shape
    (torch.Size([4, 10, 32]), torch.Size([1, 4, 32]))
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size)


class DPGRU(_DPRNNBase):
    __doc__ = f"""``nn.GRU`` built from ``nn.Linear`` layers, for exact per-layer clipping.

    Same constructor, forward and results as ``torch.nn.GRU`` (packed sequences are not implemented).

    Parameters
    ----------
{_RNN_PARAMS}

    See Also
    --------
    DPLSTM : The drop-in for ``nn.LSTM``.
    DPRNN : The drop-in for ``nn.RNN``.
    fix_module : Swap every ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` of a model for its drop-in.

    Examples
    --------
    >>> import torch
    >>> from skdp.nn import DPGRU
    >>> output, h_n = DPGRU(8, 16, num_layers=2, batch_first=True)(torch.zeros(4, 5, 8))
    >>> output.shape, h_n.shape
    (torch.Size([4, 5, 16]), torch.Size([2, 4, 16]))
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional)


class DPRNN(_DPRNNBase):
    __doc__ = f"""``nn.RNN`` (Elman) built from ``nn.Linear`` layers, for exact per-layer clipping.

    Same constructor, forward and results as ``torch.nn.RNN`` (packed sequences are not implemented).

    Parameters
    ----------
{_RNN_PARAMS.split(chr(10) + "    bias")[0]}
    nonlinearity : {{"tanh", "relu"}}, default="tanh"
        The activation of the hidden state.
    bias{_RNN_PARAMS.split(chr(10) + "    bias", 1)[1]}

    See Also
    --------
    DPLSTM : The drop-in for ``nn.LSTM``.
    DPGRU : The drop-in for ``nn.GRU``.
    fix_module : Swap every ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` of a model for its drop-in.

    Examples
    --------
    >>> import torch
    >>> from skdp.nn import DPRNN
    >>> output, h_n = DPRNN(8, 16, nonlinearity="relu", bidirectional=True)(torch.zeros(5, 4, 8))
    >>> output.shape, h_n.shape
    (torch.Size([5, 4, 32]), torch.Size([2, 4, 16]))
    """

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}.")
        super().__init__(f"RNN_{nonlinearity.upper()}", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional)
        self.nonlinearity = nonlinearity


class DPMultiheadAttention(nn.Module):
    """``nn.MultiheadAttention`` built from four ``nn.Linear`` layers, for exact per-layer clipping.

    Same constructor and forward as ``torch.nn.MultiheadAttention`` (``add_bias_kv`` is not
    implemented: its ``bias_k``/``bias_v`` would need a rule of their own). ``in_proj_bias`` is None and
    ``_qkv_same_embed_dim`` False so that ``nn.TransformerEncoderLayer`` never takes its fused
    inference path, which reads ``in_proj_weight``.

    Parameters
    ----------
    embed_dim : int
        Model dimension E (query features and output features).
    num_heads : int
        Number of heads; must divide ``embed_dim``.
    dropout : float, default=0.0
        Dropout on the attention weights, in training mode.
    bias : bool, default=True
        Biases of the four projections.
    add_bias_kv : bool, default=False
        Must be False.
    add_zero_attn : bool, default=False
        Append a zero key and value to every sequence, as torch does.
    kdim, vdim : int, optional
        Features of key and value (default ``embed_dim``).
    batch_first : bool, default=False
        Inputs and output as ``(batch, sequence, features)``.

    See Also
    --------
    DPLSTM : The drop-in for ``nn.LSTM``.
    fix_module : Swap every ``nn.MultiheadAttention`` of a model (in a ``nn.TransformerEncoderLayer`` too).

    Examples
    --------
    >>> import torch
    >>> from skdp.nn import DPMultiheadAttention
    >>> attn = DPMultiheadAttention(16, 4, batch_first=True)
    >>> x = torch.zeros(2, 5, 16)
    >>> out, weights = attn(x, x, x)
    >>> out.shape, weights.shape
    (torch.Size([2, 5, 16]), torch.Size([2, 5, 5]))
    """

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False):
        super().__init__()
        if add_bias_kv:
            raise ValueError("DPMultiheadAttention does not implement add_bias_kv; use add_bias_kv=False.")
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}.")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.dropout, self.batch_first, self.add_zero_attn = float(dropout), bool(batch_first), bool(add_zero_attn)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(self.kdim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(self.vdim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        # Read by nn.TransformerEncoder(Layer) to decide on the fused path: these values rule it out.
        self._qkv_same_embed_dim = False
        self.in_proj_bias = None
        self.in_proj_weight = None
        self.bias_k = self.bias_v = None

    def load_torch_weights(self, mha):
        """Copy the weights of an ``nn.MultiheadAttention`` of the same sizes.

        The fused ``in_proj_weight`` (or the separate ``q_proj_weight``,
        ``k_proj_weight`` and ``v_proj_weight``) is split into the three
        projections.

        Parameters
        ----------
        mha : torch.nn.MultiheadAttention
            The module to copy, with the same ``embed_dim``, ``kdim``,
            ``vdim`` and biases, and ``add_bias_kv=False``.

        Returns
        -------
        self : DPMultiheadAttention
            The drop-in, computing the same function as ``mha``.
        """
        with torch.no_grad():
            if mha._qkv_same_embed_dim:
                ws = mha.in_proj_weight.chunk(3, 0)
            else:
                ws = (mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight)
            for lin, w in zip((self.q_proj, self.k_proj, self.v_proj), ws):
                lin.weight.copy_(w)
            if mha.in_proj_bias is not None:
                for lin, b in zip((self.q_proj, self.k_proj, self.v_proj), mha.in_proj_bias.chunk(3, 0)):
                    lin.bias.copy_(b)
            self.out_proj.weight.copy_(mha.out_proj.weight)
            if mha.out_proj.bias is not None:
                self.out_proj.bias.copy_(mha.out_proj.bias)
        return self

    def _mask(self, attn_mask, key_padding_mask, B, L, S, dtype, device):
        """One additive float mask broadcastable to ``(B, heads, L, S)``, or None."""
        mask = None
        if attn_mask is not None:
            m = attn_mask
            m = torch.zeros_like(m, dtype=dtype).masked_fill(m, float("-inf")) if m.dtype == torch.bool else m.to(dtype)
            mask = m.view(B, self.num_heads, L, S) if m.dim() == 3 else m.view(1, 1, L, S)
        if key_padding_mask is not None:
            k = key_padding_mask
            k = torch.zeros_like(k, dtype=dtype).masked_fill(k, float("-inf")) if k.dtype == torch.bool else k.to(dtype)
            k = k.view(B, 1, 1, S)
            mask = k if mask is None else mask + k
        return mask

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        """Compute the attention of ``query`` over ``key`` and ``value``, as ``nn.MultiheadAttention`` does.

        Parameters
        ----------
        query : torch.Tensor
            ``(L, B, embed_dim)``, ``(B, L, embed_dim)`` with
            ``batch_first=True``, or unbatched ``(L, embed_dim)``.
        key : torch.Tensor
            ``(S, B, kdim)`` in the same layout.
        value : torch.Tensor
            ``(S, B, vdim)`` in the same layout.
        key_padding_mask : torch.Tensor or None, default=None
            ``(B, S)``: True (bool) or ``-inf`` (float) where a key is padding.
        need_weights : bool, default=True
            Return the attention weights (False: None, and a fused kernel).
        attn_mask : torch.Tensor or None, default=None
            ``(L, S)`` or ``(B * num_heads, L, S)``, boolean or additive float.
        average_attn_weights : bool, default=True
            Average the returned weights over the heads.
        is_causal : bool, default=False
            Without ``attn_mask``, mask every key after the query's position.

        Returns
        -------
        attn_output : torch.Tensor
            ``(L, B, embed_dim)`` in the layout of ``query``.
        attn_weights : torch.Tensor or None
            ``(B, L, S)`` (``(B, num_heads, L, S)`` when not averaged), or None
            when ``need_weights=False``.
        """
        unbatched = query.dim() == 2
        if unbatched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        B, L, S, h, hd = query.shape[0], query.shape[1], key.shape[1], self.num_heads, self.head_dim
        if is_causal and attn_mask is None:
            attn_mask = torch.ones(L, S, dtype=torch.bool, device=query.device).triu(1)
        q = self.q_proj(query).view(B, L, h, hd).transpose(1, 2)
        k = self.k_proj(key).view(B, S, h, hd).transpose(1, 2)
        v = self.v_proj(value).view(B, S, h, hd).transpose(1, 2)
        if self.add_zero_attn:
            k = torch.cat([k, k.new_zeros(B, h, 1, hd)], 2)
            v = torch.cat([v, v.new_zeros(B, h, 1, hd)], 2)
            if attn_mask is not None:
                attn_mask = F.pad(attn_mask, (0, 1))
            if key_padding_mask is not None:
                key_padding_mask = F.pad(key_padding_mask, (0, 1))
            S += 1
        mask = self._mask(attn_mask, key_padding_mask, B, L, S, q.dtype, q.device)
        p = self.dropout if self.training else 0.0
        if need_weights:
            scores = q @ k.transpose(-2, -1) / math.sqrt(hd)
            if mask is not None:
                scores = scores + mask
            weights = torch.softmax(scores, -1)
            out = F.dropout(weights, p, True) @ v if p else weights @ v
        else:
            weights = None
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        out = self.out_proj(out.transpose(1, 2).reshape(B, L, self.embed_dim))
        if weights is not None and average_attn_weights:
            weights = weights.mean(1)
        if unbatched:
            out = out.squeeze(0)
            weights = None if weights is None else weights.squeeze(0)
        elif not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights

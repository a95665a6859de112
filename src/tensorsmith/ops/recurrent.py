"""Recurrent ops: RNN, GRU and LSTM (opsets 7 to 22, with layout from 14).

One driver runs any cell over time, for each direction, honouring sequence_lens (steps past a
sequence's length leave its state unchanged and write zeros to Y) and the batch-major layout.
Each op supplies a cell: (x_t, states) -> new states, the hidden state first.
"""

from __future__ import annotations

import torch

from ..ir import TensorType
from .registry import InferContext, register

# activation name (lower case) -> (function of x, alpha, beta; default alpha; default beta)
_ACTIVATIONS = {
    "relu": (lambda x, a, b: torch.relu(x), None, None),
    "tanh": (lambda x, a, b: torch.tanh(x), None, None),
    "sigmoid": (lambda x, a, b: torch.sigmoid(x), None, None),
    "affine": (lambda x, a, b: x * a + b, 1.0, 0.0),
    "leakyrelu": (lambda x, a, b: torch.where(x >= 0, x, x * a), 0.01, None),
    "thresholdedrelu": (lambda x, a, b: torch.where(x > a, x, torch.zeros_like(x)), 1.0, None),
    "scaledtanh": (lambda x, a, b: torch.tanh(x * b) * a, 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: torch.clamp(x * a + b, 0.0, 1.0), 0.2, 0.5),
    "elu": (lambda x, a, b: torch.where(x >= 0, x, (torch.exp(x) - 1) * a), 1.0, None),
    "softsign": (lambda x, a, b: x / (1 + torch.abs(x)), None, None),
    "softplus": (lambda x, a, b: torch.nn.functional.softplus(x), None, None),
}


def _num_directions(ctx) -> int:
    direction = ctx.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ValueError(f"direction must be forward, reverse or bidirectional, got '{direction}'")
    return 2 if direction == "bidirectional" else 1


def _activations(ctx, defaults: list[str]) -> list:
    """The activation functions, per direction: a list of num_directions lists of callables.

    activation_alpha/beta are consumed in order by the activations that take them; a missing
    value takes the default of the corresponding ONNX op.
    """
    dirs = _num_directions(ctx)
    names = ctx.attr("activations") or defaults * dirs
    if len(names) != len(defaults) * dirs:
        raise ValueError(f"expected {len(defaults) * dirs} activations, got {len(names)}: {names}")
    alphas = list(ctx.attr("activation_alpha") or [])
    betas = list(ctx.attr("activation_beta") or [])
    fns = []
    for name in names:
        entry = _ACTIVATIONS.get(name.lower())
        if entry is None:
            raise ValueError(f"unsupported activation '{name}'")
        fn, a_default, b_default = entry
        a = (alphas.pop(0) if alphas else a_default) if a_default is not None else None
        b = (betas.pop(0) if betas else b_default) if b_default is not None else None
        fns.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
    n = len(defaults)
    return [fns[d * n:(d + 1) * n] for d in range(dirs)]


def _clipper(ctx):
    clip = ctx.attr("clip")
    if clip is None:
        return lambda x: x
    return lambda x: torch.clamp(x, -clip, clip)


def _check_hidden(ctx, r: torch.Tensor) -> int:
    hidden = r.shape[-1]
    attr = ctx.attr("hidden_size")
    if attr is not None and attr != hidden:
        raise ValueError(f"hidden_size attribute {attr} does not match R's last dim {hidden}")
    return hidden


def _run(ctx, x, initial_states, sequence_lens, make_cell):
    """Run make_cell(direction) over x for every direction; returns (Y, *final states)."""
    layout = ctx.attr("layout", 0)
    dirs = _num_directions(ctx)
    if layout:
        x = x.transpose(0, 1)
        initial_states = [s.transpose(0, 1) for s in initial_states]
    steps, batch = x.shape[0], x.shape[1]
    hidden = initial_states[0].shape[-1]
    lens = None if sequence_lens is None else sequence_lens.to(torch.int64).reshape(batch, 1)
    reverse_only = ctx.attr("direction", "forward") == "reverse"
    ys, finals = [], []
    for d in range(dirs):
        cell = make_cell(d)
        states = [s[d] for s in initial_states]
        outs = [None] * steps
        order = range(steps - 1, -1, -1) if (reverse_only or d == 1) else range(steps)
        for t in order:
            new = cell(x[t], states)
            if lens is not None:
                valid = t < lens
                new = [torch.where(valid, n, s) for n, s in zip(new, states)]
                outs[t] = torch.where(valid, new[0], torch.zeros((), dtype=x.dtype, device=x.device))
            else:
                outs[t] = new[0]
            states = new
        ys.append(torch.stack(outs) if steps else x.new_zeros((0, batch, hidden)))
        finals.append(states)
    y = torch.stack(ys, dim=1)  # (seq, dirs, batch, hidden)
    final = [torch.stack([f[k] for f in finals]) for k in range(len(initial_states))]
    if layout:
        y = y.permute(2, 0, 1, 3)
        final = [f.transpose(0, 1) for f in final]
    return (y, *final)


def _initial(t, dirs, batch, hidden, like, layout):
    if t is not None:
        return t
    shape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    return torch.zeros(shape, dtype=like.dtype, device=like.device)


def _batch(ctx, x) -> int:
    return x.shape[0] if ctx.attr("layout", 0) else x.shape[1]


def _recurrent_infer(num_states: int):
    """Y (seq, dirs, batch, hidden) and final states (dirs, batch, hidden), batch-major for layout=1."""

    def infer(ctx: InferContext) -> list[TensorType]:
        x, r = ctx.input(0), ctx.input(2)
        dtype = x.dtype if x else None
        dirs = 2 if ctx.attr("direction", "forward") == "bidirectional" else 1
        hidden = ctx.attr("hidden_size")
        if hidden is None and r is not None and r.shape is not None:
            hidden = r.shape[2]
        y = state = None
        if x is not None and x.shape is not None and hidden is not None:
            if ctx.attr("layout", 0):
                batch, seq = x.shape[0], x.shape[1]
                y, state = (batch, seq, dirs, hidden), (batch, dirs, hidden)
            else:
                seq, batch = x.shape[0], x.shape[1]
                y, state = (seq, dirs, batch, hidden), (dirs, batch, hidden)
        out = [TensorType(dtype, y)] + [TensorType(dtype, state)] * num_states
        return out[: ctx.num_outputs]

    return infer


@register("RNN", infer=_recurrent_infer(1))
def rnn(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None):
    hidden = _check_hidden(ctx, r)
    dirs, layout = _num_directions(ctx), ctx.attr("layout", 0)
    acts, clip = _activations(ctx, ["Tanh"]), _clipper(ctx)
    h0 = _initial(initial_h, dirs, _batch(ctx, x), hidden, x, layout)

    def make_cell(d):
        wt, rt = w[d].t(), r[d].t()
        bias = 0 if b is None else b[d, :hidden] + b[d, hidden:]
        f = acts[d][0]
        return lambda xt, s: [f(clip(xt @ wt + s[0] @ rt + bias))]

    return _run(ctx, x, [h0], sequence_lens, make_cell)


@register("GRU", infer=_recurrent_infer(1))
def gru(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None):
    hidden = _check_hidden(ctx, r)
    dirs, layout = _num_directions(ctx), ctx.attr("layout", 0)
    acts, clip = _activations(ctx, ["Sigmoid", "Tanh"]), _clipper(ctx)
    linear_before_reset = ctx.attr("linear_before_reset", 0)
    h0 = _initial(initial_h, dirs, _batch(ctx, x), hidden, x, layout)
    n = hidden

    def make_cell(d):
        f, g = acts[d]
        wt, rt = w[d].t(), r[d].t()  # columns in gate order z, r, h
        bias = torch.zeros(6 * n, dtype=x.dtype, device=x.device) if b is None else b[d]
        wb, rb = bias[: 3 * n], bias[3 * n:]

        def cell(xt, s):
            h = s[0]
            xw = xt @ wt + wb
            hr_zr = h @ rt[:, : 2 * n] + rb[: 2 * n]
            z = f(clip(xw[:, :n] + hr_zr[:, :n]))
            rg = f(clip(xw[:, n: 2 * n] + hr_zr[:, n:]))
            if linear_before_reset:
                cand = xw[:, 2 * n:] + rg * (h @ rt[:, 2 * n:] + rb[2 * n:])
            else:
                cand = xw[:, 2 * n:] + (rg * h) @ rt[:, 2 * n:] + rb[2 * n:]
            hh = g(clip(cand))
            return [(1 - z) * hh + z * h]

        return cell

    return _run(ctx, x, [h0], sequence_lens, make_cell)


@register("LSTM", infer=_recurrent_infer(2))
def lstm(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None):
    hidden = _check_hidden(ctx, r)
    dirs, layout = _num_directions(ctx), ctx.attr("layout", 0)
    acts, clip = _activations(ctx, ["Sigmoid", "Tanh", "Tanh"]), _clipper(ctx)
    input_forget = ctx.attr("input_forget", 0)
    batch = _batch(ctx, x)
    h0 = _initial(initial_h, dirs, batch, hidden, x, layout)
    c0 = _initial(initial_c, dirs, batch, hidden, x, layout)
    n = hidden

    def make_cell(d):
        f, g, hf = acts[d]
        wt, rt = w[d].t(), r[d].t()  # columns in gate order i, o, f, c
        bias = 0 if b is None else b[d, : 4 * n] + b[d, 4 * n:]
        pi, po, pf = (0, 0, 0) if p is None else (p[d, :n], p[d, n: 2 * n], p[d, 2 * n:])

        def cell(xt, s):
            h, c = s
            gates = xt @ wt + h @ rt + bias
            i = f(clip(gates[:, :n] + pi * c))
            # input_forget couples the gates: what is written is what is forgotten.
            fg = 1 - i if input_forget else f(clip(gates[:, 2 * n: 3 * n] + pf * c))
            cand = g(clip(gates[:, 3 * n:]))
            c_new = fg * c + i * cand
            o = f(clip(gates[:, n: 2 * n] + po * c_new))
            return [o * hf(c_new), c_new]

        return cell

    return _run(ctx, x, [h0, c0], sequence_lens, make_cell)

"""Control flow: If, Loop and Scan over tensor values.

Bodies are IR Graphs in the node's attributes, run with ctx.run_subgraph (the enclosing scope
stays visible to them). Sequence and optional values are outside the IR, so bodies that carry
them fail at import as unsupported types.

Type inference reads the body graphs' output types, which infer_graph sets before it reaches
the node.
"""

from __future__ import annotations

import torch

from ..ir import TensorType
from ._util import normalize_axis
from .registry import InferContext, register


def _out_type(graph, i: int) -> TensorType | None:
    return graph.outputs[i].type if i < len(graph.outputs) else None


def _scalar_bool(t: torch.Tensor, what: str) -> bool:
    if t.numel() != 1:
        raise ValueError(f"{what} must hold one element, got shape {tuple(t.shape)}")
    return bool(t.reshape(()).item())


def _device(*tensors) -> torch.device:
    return next((t.device for t in tensors if isinstance(t, torch.Tensor)), torch.device("cpu"))


# -- If ----------------------------------------------------------------------------------


def _merge_shapes(a, b, symbol: str):
    """The shape both branches agree on: equal dims kept, differing dims a fresh symbol."""
    if a is None or b is None or len(a) != len(b):
        return None
    return tuple(x if x == y else f"{symbol}_d{j}" for j, (x, y) in enumerate(zip(a, b)))


def _if_infer(ctx: InferContext) -> list[TensorType]:
    then_g, else_g = ctx.attr("then_branch"), ctx.attr("else_branch")
    out = []
    for i in range(ctx.num_outputs):
        t, e = _out_type(then_g, i), _out_type(else_g, i)
        dtype = (t.dtype if t else None) or (e.dtype if e else None)
        shape = _merge_shapes(t.shape if t else None, e.shape if e else None, f"{ctx.node.name}_out{i}")
        out.append(TensorType(dtype, shape))
    return out


@register("If", infer=_if_infer)
def if_(ctx, cond):
    branch = ctx.attr("then_branch") if _scalar_bool(cond, "If condition") else ctx.attr("else_branch")
    outs = ctx.run_subgraph(branch, [])
    if len(outs) != ctx.num_outputs:
        raise ValueError(f"the branch produced {len(outs)} outputs, the node has {ctx.num_outputs}")
    return tuple(outs)


# -- Loop --------------------------------------------------------------------------------


def _stack_scans(per_iter: list[list[torch.Tensor]], body, first: int, count: int, device) -> list[torch.Tensor]:
    """Scan outputs stacked on a new leading axis; with no iteration, empty tensors of the body's type."""
    if per_iter:
        return [torch.stack([it[k] for it in per_iter]) for k in range(count)]
    out = []
    for k in range(count):
        t = _out_type(body, first + k)
        if t is None or t.dtype is None:
            raise ValueError("Loop ran no iteration and the type of its scan output is unknown")
        dims = t.shape if t.shape is not None and all(isinstance(d, int) for d in t.shape) else ()
        out.append(torch.zeros((0, *dims), dtype=t.dtype.torch, device=device))
    return out


def _loop_infer(ctx: InferContext) -> list[TensorType]:
    body = ctx.attr("body")
    n_carried = len(ctx.inputs) - 2
    out = []
    for i in range(ctx.num_outputs):
        t = _out_type(body, 1 + i)
        dtype = t.dtype if t else None
        if i < n_carried:
            init = ctx.input(2 + i)
            # A carried value keeps its shape only when the body does not change it.
            shape = t.shape if t and init and t.shape is not None and t.shape == init.shape else None
        else:
            shape = (f"{ctx.node.name}_iters", *t.shape) if t and t.shape is not None else None
        out.append(TensorType(dtype, shape))
    return out


@register("Loop", infer=_loop_infer)
def loop(ctx, trip_count=None, cond=None, *carried):
    body = ctx.attr("body")
    n_carried = len(carried)
    n_scan = len(body.outputs) - 1 - n_carried
    if n_scan < 0:
        raise ValueError(f"the body has {len(body.outputs)} outputs, fewer than 1 + {n_carried} carried values")
    if trip_count is None and cond is None:
        raise ValueError("Loop without trip count and condition would never end")
    device = _device(trip_count, cond, *carried)
    trips = None if trip_count is None else int(trip_count.reshape(()).item())
    going = True if cond is None else _scalar_bool(cond, "Loop condition")
    per_iter = []
    i = 0
    while going and (trips is None or i < trips):
        outs = ctx.run_subgraph(body, [
            torch.tensor(i, dtype=torch.int64, device=device),
            torch.tensor(going, dtype=torch.bool, device=device),
            *carried,
        ])
        # Without a condition input the body's condition output is ignored (a for loop).
        if cond is not None:
            going = _scalar_bool(outs[0], "Loop body condition")
        carried = tuple(outs[1:1 + n_carried])
        per_iter.append(outs[1 + n_carried:])
        i += 1
    return (*carried, *_stack_scans(per_iter, body, 1 + n_carried, n_scan, device))


# -- Scan --------------------------------------------------------------------------------


def _scan_attrs(ctx, n_inputs: int, n_outputs: int):
    in_axes = ctx.attr("scan_input_axes") or [0] * n_inputs
    in_dirs = ctx.attr("scan_input_directions") or ctx.attr("directions") or [0] * n_inputs
    out_axes = ctx.attr("scan_output_axes") or [0] * n_outputs
    out_dirs = ctx.attr("scan_output_directions") or [0] * n_outputs
    if len(in_axes) != n_inputs or len(in_dirs) != n_inputs or len(out_axes) != n_outputs or len(out_dirs) != n_outputs:
        raise ValueError("scan axes/directions attributes must have one entry per scan input/output")
    return in_axes, in_dirs, out_axes, out_dirs


def _scan(ctx, states, inputs, in_axes, in_dirs, out_axes, out_dirs, steps=None):
    """One Scan-9 run; `steps` (Scan-8 sequence_lens) may stop it before the full length."""
    body = ctx.attr("body")
    n_out = len(body.outputs) - len(states)
    axes = [normalize_axis(a, x.dim()) for a, x in zip(in_axes, inputs)]
    lengths = {x.shape[a] for x, a in zip(inputs, axes)}
    if len(lengths) != 1:
        raise ValueError(f"scan inputs have different lengths along their scan axes: {sorted(lengths)}")
    length = lengths.pop()
    run = length if steps is None else steps
    per_iter = []
    for t in range(run):
        slices = [x.select(a, length - 1 - t if d else t) for x, a, d in zip(inputs, axes, in_dirs)]
        outs = ctx.run_subgraph(body, [*states, *slices])
        states = outs[: len(states)]
        per_iter.append(outs[len(states):])
    scans = []
    for k in range(n_out):
        items = [it[k] for it in per_iter]
        if out_dirs[k]:
            items = items[::-1]
        if not items:
            t = _out_type(body, len(states) + k)
            dims = t.shape if t and t.shape and all(isinstance(d, int) for d in t.shape) else ()
            stacked = torch.zeros((0, *dims), dtype=t.dtype.torch if t and t.dtype else torch.float32,
                                  device=_device(*inputs))
        else:
            stacked = torch.stack(items)
        if run < length:  # Scan-8 pads a short sequence's outputs with zeros
            pad = stacked.new_zeros((length - run, *stacked.shape[1:]))
            stacked = torch.cat([pad, stacked] if out_dirs[k] else [stacked, pad])
        axis = normalize_axis(out_axes[k], stacked.dim())
        scans.append(stacked.movedim(0, axis))
    return list(states), scans


def _scan_infer(ctx: InferContext) -> list[TensorType]:
    body = ctx.attr("body")
    n_scan_in = ctx.attr("num_scan_inputs", 0)
    batched = ctx.opset < 9
    n_states = len(ctx.inputs) - n_scan_in - (1 if batched else 0)
    first_scan = ctx.input(len(ctx.inputs) - n_scan_in) if n_scan_in else None
    out = []
    for i in range(ctx.num_outputs):
        t = _out_type(body, i)
        dtype = t.dtype if t else None
        shape = None
        if t is not None and t.shape is not None:
            if batched:
                batch = first_scan.shape[0] if first_scan and first_scan.shape else f"{ctx.node.name}_batch"
                seq = first_scan.shape[1] if first_scan and first_scan.shape else f"{ctx.node.name}_seq"
                shape = (batch, *t.shape) if i < n_states else (batch, seq, *t.shape)
            elif i < n_states:
                shape = t.shape
            else:
                k = i - n_states
                axes = ctx.attr("scan_output_axes") or [0] * (ctx.num_outputs - n_states)
                in_axes = ctx.attr("scan_input_axes") or [0] * n_scan_in
                seq = f"{ctx.node.name}_seq"
                if first_scan and first_scan.shape is not None:
                    seq = first_scan.shape[in_axes[0] % len(first_scan.shape)]
                axis = axes[k] % (len(t.shape) + 1)
                shape = (*t.shape[:axis], seq, *t.shape[axis:])
        out.append(TensorType(dtype, shape))
    return out


@register("Scan", infer=_scan_infer, since=8)
def scan(ctx, *args):
    n_scan_in = ctx.attr("num_scan_inputs")
    body = ctx.attr("body")
    if ctx.opset >= 9:
        n_states = len(args) - n_scan_in
        states, inputs = list(args[:n_states]), list(args[n_states:])
        attrs = _scan_attrs(ctx, n_scan_in, len(body.outputs) - n_states)
        states, scans = _scan(ctx, states, inputs, *attrs)
        return (*states, *scans)
    return _scan8(ctx, args, n_scan_in, body)


def _scan8(ctx, args, n_scan_in, body):
    """Scan-8: every input has a leading batch axis, scanned along axis 1, one run per batch item."""
    seq_lens, rest = (args[0], args[1:]) if args else (None, ())
    n_states = len(rest) - n_scan_in
    states, inputs = list(rest[:n_states]), list(rest[n_states:])
    n_out = len(body.outputs) - n_states
    in_dirs = ctx.attr("directions") or [0] * n_scan_in
    batch = inputs[0].shape[0]
    results = []
    for b in range(batch):
        steps = None if seq_lens is None else int(seq_lens[b].item())
        results.append(_scan(ctx, [s[b] for s in states], [x[b] for x in inputs],
                             [0] * n_scan_in, in_dirs, [0] * n_out, [0] * n_out, steps))
    final = [torch.stack([r[0][k] for r in results]) for k in range(n_states)]
    scans = [torch.stack([r[1][k] for r in results]) for k in range(n_out)]
    return (*final, *scans)

"""Folding per-channel affine ops into the weights of the linear op before them.

Conv/ConvTranspose/Gemm/MatMul followed by BatchNormalization, or by Mul/Add with a
per-output-channel constant, compute `W' x + b'` with new weights; the BN/Mul/Add disappears.
"""

from __future__ import annotations

import torch

from ..ir import Graph, Node, Value
from .manager import register_pass
from .rewrite import (
    add_constant,
    constant_value,
    is_graph_output,
    remove_dead,
    single_user,
)

_LINEAR = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def _channels_and_axis(node: Node) -> tuple[int, int] | None:
    """(number of output channels, axis of the output that holds them) of a linear node."""
    w = constant_value(node.graph, node.inputs[1])
    if w is None:
        return None
    if node.op_type == "Conv":
        return w.shape[0], 1
    if node.op_type == "ConvTranspose":
        return w.shape[1] * node.attrs.get("group", 1), 1
    if node.op_type == "Gemm":
        return (w.shape[0] if node.attrs.get("transB", 0) else w.shape[1]), 1
    if node.op_type == "MatMul" and w.dim() == 2:
        out = node.outputs[0].type
        return w.shape[1], (out.rank - 1 if out is not None and out.rank else -1)
    return None


def _scaled_weight(node: Node, w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """W with each output channel c multiplied by s[c] (computed in float64, stored in W's dtype)."""
    dtype, w, s = w.dtype, w.double(), s.double()
    return _scale_channels(node, w, s).to(dtype)


def _scale_channels(node: Node, w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    if node.op_type == "Conv":
        return w * s.reshape(-1, *([1] * (w.dim() - 1)))
    if node.op_type == "ConvTranspose":
        g = node.attrs.get("group", 1)
        cin, cout_g = w.shape[0], w.shape[1]
        ws = w.reshape(g, cin // g, cout_g, *w.shape[2:])
        ss = s.reshape(g, 1, cout_g, *([1] * (w.dim() - 2)))
        return (ws * ss).reshape(w.shape)
    if node.op_type == "Gemm" and node.attrs.get("transB", 0):
        return w * s.reshape(-1, 1)
    return w * s.reshape(1, -1)  # Gemm (K, N) and MatMul (K, N)


def _bias_of(node: Node, channels: int, dtype) -> torch.Tensor | None:
    """The current per-channel bias (zeros if none); None if it is not a per-channel constant."""
    if node.op_type == "MatMul":
        return torch.zeros(channels, dtype=dtype)
    b = node.inputs[2] if len(node.inputs) > 2 else None
    if b is None:
        return torch.zeros(channels, dtype=dtype)
    t = constant_value(node.graph, b)
    if t is None:
        return None
    if node.op_type == "Gemm":
        if t.numel() not in (1, channels) or (t.dim() == 2 and t.shape[0] != 1):
            return None
        return (t.reshape(-1).expand(channels) * node.attrs.get("beta", 1.0)).to(dtype)
    return t.reshape(-1).to(dtype)


def _apply(graph: Graph, lin: Node, scale: torch.Tensor, shift: torch.Tensor, absorbed: Node) -> None:
    """Rewrite lin to compute scale * lin(x) + shift per channel, replacing `absorbed`'s output."""
    w = constant_value(graph, lin.inputs[1])
    channels, _ = _channels_and_axis(lin)
    bias = _bias_of(lin, channels, w.dtype)
    lin.set_input(1, add_constant(graph, f"{lin.name}_weight", _scaled_weight(lin, w, scale)))
    new_bias = (bias.double() * scale + shift).to(w.dtype)
    if lin.op_type == "MatMul" and not new_bias.any():
        lin.sources.extend(s for s in absorbed.sources if s not in lin.sources)
        graph.replace_all_uses(absorbed.outputs[0], lin.outputs[0])
        remove_dead(graph, [absorbed])
        return
    new_bias = add_constant(graph, f"{lin.name}_bias", new_bias)
    if lin.op_type == "MatMul":
        # MatMul has no bias input: the bias becomes an Add, which layer fusion runs as an epilogue.
        add = Node("Add", [lin.outputs[0], new_bias], [Value(graph.fresh_name(f"{lin.name}_biased"))],
                   name=graph.fresh_name(f"{lin.name}_bias_add"), opset=lin.opset)
        add.sources = list(absorbed.sources)
        add.outputs[0].type = absorbed.outputs[0].type
        old_out = absorbed.outputs[0]
        graph.insert(graph.nodes.index(absorbed), add)
        graph.replace_all_uses(old_out, add.outputs[0])
        remove_dead(graph, [absorbed])
        return
    if lin.op_type == "Gemm":
        lin.attrs["beta"] = 1.0
    while len(lin.inputs) < 3:
        lin._add_input(None)
    lin.set_input(2, new_bias)
    lin.sources.extend(s for s in absorbed.sources if s not in lin.sources)
    out = absorbed.outputs[0]
    lin_out = lin.outputs[0]
    lin_out.type = out.type or lin_out.type
    graph.replace_all_uses(out, lin_out)
    remove_dead(graph, [absorbed])


def _foldable_linear(graph: Graph, v: Value | None) -> Node | None:
    node = v.producer if v is not None else None
    if node is None or node.graph is not graph or node.op_type not in _LINEAR or node.domain:
        return None
    if single_user(v) is None or is_graph_output(graph, v) or _channels_and_axis(node) is None:
        return None
    w = constant_value(graph, node.inputs[1])
    if not w.dtype.is_floating_point:
        return None
    if node.op_type == "Gemm" and node.attrs.get("alpha", 1.0) != 1.0:
        return None
    if _bias_of(node, _channels_and_axis(node)[0], w.dtype) is None:
        return None
    return node


@register_pass("batchnorm_folding", 2, "fold inference BatchNormalization into the Conv/ConvTranspose/Gemm/MatMul before it")
def batchnorm_folding(graph: Graph) -> bool:
    changed = False
    for bn in list(graph.nodes):
        if bn.op_type != "BatchNormalization" or bn.domain or bn.graph is not graph:
            continue
        if len(bn.outputs) > 1 and any(o.users or is_graph_output(graph, o) for o in bn.outputs[1:]):
            continue  # training outputs are read
        if bn.attrs.get("training_mode", 0):
            continue
        lin = _foldable_linear(graph, bn.inputs[0])
        params = [constant_value(graph, v) for v in bn.inputs[1:5]]
        if lin is None or any(p is None for p in params):
            continue
        channels, axis = _channels_and_axis(lin)
        if axis != 1 or any(p.numel() != channels for p in params):
            continue
        gamma, beta, mean, var = (p.reshape(-1).double() for p in params)
        scale = gamma / torch.sqrt(var + bn.attrs.get("epsilon", 1e-5))
        _apply(graph, lin, scale, beta - mean * scale, bn)
        changed = True
    return changed


def _per_channel(t: torch.Tensor, channels: int, axis: int, rank: int) -> torch.Tensor | None:
    """t as a [channels] vector if it broadcasts only along the channel axis, else None."""
    if t.numel() == 1:
        return t.reshape(1).expand(channels).double()
    if t.dim() > rank or t.numel() != channels:
        return None
    dims = [1] * (rank - t.dim()) + list(t.shape)
    if dims[axis % rank] != channels:
        return None
    return t.reshape(-1).double()


@register_pass("scale_shift_folding", 2, "fold a per-channel constant Mul/Add after a Conv/Gemm/MatMul into its weights and bias")
def scale_shift_folding(graph: Graph) -> bool:
    changed = False
    for node in list(graph.nodes):
        if node.op_type not in ("Mul", "Add") or node.domain or node.graph is not graph:
            continue
        for i in (0, 1):
            lin = _foldable_linear(graph, node.inputs[i])
            c = constant_value(graph, node.inputs[1 - i])
            out_t = node.outputs[0].type
            if lin is None or c is None or out_t is None or out_t.rank is None:
                continue
            if lin.outputs[0].type is None or lin.outputs[0].type.shape != out_t.shape:
                continue  # the constant must not broadcast the result to a bigger shape
            channels, axis = _channels_and_axis(lin)
            vec = _per_channel(c, channels, axis, out_t.rank)
            if vec is None or (lin.op_type == "MatMul" and node.op_type == "Add"):
                continue  # MatMul + bias Add is already the fused form
            ones, zeros = torch.ones(channels, dtype=torch.float64), torch.zeros(channels, dtype=torch.float64)
            scale, shift = (vec, zeros) if node.op_type == "Mul" else (ones, vec)
            _apply(graph, lin, scale, shift, node)
            changed = True
            break
    return changed

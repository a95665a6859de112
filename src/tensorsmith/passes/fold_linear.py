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


def _biased_conv_into(graph: Graph, v: Value | None, add: Node) -> Node | None:
    """The Conv producing `v` if `add` is its only reader and its weight and bias are constants."""
    conv = v.producer if v is not None else None
    if conv is None or conv.op_type != "Conv" or conv.domain or conv.graph is not graph:
        return None
    if single_user(v) is not add or is_graph_output(graph, v) or constant_value(graph, conv.inputs[1]) is None:
        return None
    b = conv.inputs[2] if len(conv.inputs) > 2 else None
    return conv if b is None or constant_value(graph, b) is not None else None


@register_pass("residual_bias_merging", 2,
               "Add(Conv(x) + b1, Conv(y) + b2): one Conv carries b1 + b2, so the other needs no bias pass")
def residual_bias_merging(graph: Graph) -> bool:
    """A residual Add of two biased Convs (a ResNet block's last conv and its downsample conv,
    after BatchNorm folding) needs one bias, not two. cuDNN applies a bias for free only where it
    fuses the epilogue (conv + bias + add + relu); elsewhere PyTorch adds it in a pass of its own
    over the output. The Conv first in node order takes both biases and the other keeps none;
    Layer grouping (passes/layers.py) then gives the Add to the biased Conv, whatever the order."""
    changed = False
    for add in list(graph.nodes):
        if add.op_type != "Add" or add.domain or add.graph is not graph or len(add.inputs) != 2:
            continue
        convs = [_biased_conv_into(graph, v, add) for v in add.inputs]
        if None in convs or convs[0] is convs[1]:
            continue
        shapes = {v.type.shape if v.type is not None else None for v in [c.outputs[0] for c in convs] + add.outputs}
        if len(shapes) != 1 or None in shapes:
            continue  # a broadcasting Add would spread the bias over more than one output
        order = {id(n): i for i, n in enumerate(graph.nodes)}
        keep, drop = sorted(convs, key=lambda n: order[id(n)])
        w = constant_value(graph, keep.inputs[1])
        if len(drop.inputs) < 3 or drop.inputs[2] is None or constant_value(graph, drop.inputs[1]).dtype != w.dtype:
            continue
        channels = w.shape[0]
        dropped = _bias_of(drop, channels, w.dtype)
        merged = _bias_of(keep, channels, w.dtype).double() + dropped.double()
        while len(keep.inputs) < 3:
            keep._add_input(None)
        keep.set_input(2, add_constant(graph, f"{keep.name}_bias", merged.to(w.dtype)))
        drop.set_input(2, None)
        changed = True
    return changed

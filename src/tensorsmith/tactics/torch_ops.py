"""Tactics that call cuDNN/cuBLAS(Lt) through PyTorch, with the epilogue fused where PyTorch
exposes a fused call (conv+bias+relu, conv+bias+add+relu, addmm with bias+relu/gelu), and the
rest of the Layer run op by op after it; or, for a convolution, the whole elementwise tail as
one generated Triton kernel after cuDNN (triton/epilogue.py)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ..ir import Node
from ..ops import RunContext, lookup
from .base import (
    LayerContext,
    Runner,
    Tactic,
    binds_outputs,
    given_output,
    output_binding,
    register_tactic,
)


def _tail_runner(lc: LayerContext, head: Callable[[dict], None], consumed: int) -> Runner:
    """A runner that computes the first `consumed` nodes with `head(env)` (which writes the
    output of the last consumed node into env) and the remaining nodes with their references."""
    rest = [(lookup(n.op_type, n.domain, n.opset, n.name).reference, RunContext(n), n) for n in lc.nodes[consumed:]]
    in_names = [v.name for v in lc.inputs]
    out_names = [v.name for v in lc.outputs]
    weights = dict(lc.weights)

    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        env = dict(weights)
        env.update(zip(in_names, inputs))
        head(env)
        for ref, ctx, node in rest:
            res = ref(ctx, *[env[v.name] if v is not None else None for v in node.inputs])
            res = res if isinstance(res, (tuple, list)) else (res,)
            env.update((v.name, t) for v, t in zip(node.outputs, res))
        return [env[n] for n in out_names]

    return run


def _other_input(node: Node, v) -> object:
    return node.inputs[1] if node.inputs[0] is v else node.inputs[0]


# -- convolution: cuDNN, with relu / add+relu fused --------------------------------------------

def _conv2d_geometry(node: Node, lc: LayerContext):
    """(stride, padding, dilation, groups) if the conv is 2-D with symmetric explicit padding."""
    if node.op_type != "Conv" or len(lc.shape(node.inputs[0])) != 4:
        return None
    if node.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return None
    pads = list(node.attrs.get("pads", [0, 0, 0, 0]))
    if pads[:2] != pads[2:]:
        return None
    return (tuple(node.attrs.get("strides", [1, 1])), tuple(pads[:2]), tuple(node.attrs.get("dilations", [1, 1])),
            node.attrs.get("group", 1))


def _conv_tail(lc: LayerContext):
    """The Layer's nodes after the Conv as one Triton kernel (triton/epilogue.py), or None where
    that does not apply (no triton, no Triton device, a node or operand it does not handle)."""
    try:
        from .triton.epilogue import conv_tail
    except ImportError:
        return None
    return conv_tail(lc)


class CudnnConvTactic(Tactic):
    """cuDNN convolution; configs choose the memory format and whether relu / residual+relu
    run inside cuDNN (torch.cudnn_convolution_relu / cudnn_convolution_add_relu), or the
    whole elementwise tail runs as one Triton kernel after it (fuse="triton")."""

    name = "torch.cudnn_conv"
    accepts_strided = True

    def applies(self, lc: LayerContext) -> bool:
        anchor = lc.anchor
        return (lc.device.type == "cuda" and anchor is lc.nodes[0] and anchor.op_type == "Conv"
                and _conv2d_geometry(anchor, lc) is not None and lc.is_weight(anchor.inputs[1])
                and (len(anchor.inputs) < 3 or anchor.inputs[2] is None or lc.is_weight(anchor.inputs[2]))
                and lc.inputs and lc.inputs[0] is anchor.inputs[0] and lc.dtype != torch.float64)

    def _fusion(self, lc: LayerContext) -> str:
        """Which epilogue cuDNN can take: 'add_relu', 'relu' or 'none'."""
        nodes, conv = lc.nodes, lc.anchor
        out = conv.outputs[0]
        if len(nodes) >= 3 and nodes[1].op_type == "Add" and nodes[2].op_type == "Relu":
            other = _other_input(nodes[1], out)
            if other is not None and not lc.is_weight(other) and lc.shape(other) == lc.shape(out):
                return "add_relu"
        if len(nodes) >= 2 and nodes[1].op_type == "Relu":
            return "relu"
        return "none"

    def configs(self, lc: LayerContext) -> list[dict]:
        fusion = self._fusion(lc)
        fusions = ["none"] if fusion == "none" else [fusion, "none"]
        # Half precision runs NHWC (tensor cores want it; activations stay channels-last from
        # conv to conv, so the layout is not a per-layer choice the tuner could time fairly).
        layouts = (True,) if lc.dtype in (torch.float16, torch.bfloat16) else (False, True)
        configs = [{"channels_last": cl, "fuse": f} for cl in layouts for f in fusions]
        tail = _conv_tail(lc)
        if tail is not None:
            configs += [{**tail.config(cl), "fuse": "triton"} for cl in layouts]
        return configs

    def compile(self, lc: LayerContext, config: dict) -> Runner:
        conv = lc.anchor
        stride, padding, dilation, groups = _conv2d_geometry(conv, lc)
        fmt = torch.channels_last if config.get("channels_last") else torch.contiguous_format
        w = lc.weight(conv.inputs[1]).contiguous(memory_format=fmt)
        b = lc.weight(conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] is not None else None
        x_name, out = conv.inputs[0].name, conv.outputs[0].name
        fuse = config.get("fuse", "none")
        nodes = lc.nodes

        def finish(y: torch.Tensor) -> torch.Tensor:
            return y  # channels-last outputs stay so: the next conv reads them without a copy

        if fuse == "triton":
            return self._with_triton_tail(lc, config, fmt, w, b, (stride, padding, dilation, groups))
        if fuse == "add_relu":
            z_name = _other_input(nodes[1], conv.outputs[0]).name
            last = nodes[2].outputs[0].name

            def head(env):
                x = env[x_name].contiguous(memory_format=fmt)
                z = env[z_name].contiguous(memory_format=fmt)
                env[last] = finish(torch.cudnn_convolution_add_relu(x, w, z, 1.0, b, stride, padding, dilation, groups))
            return _tail_runner(lc, head, 3)
        if fuse == "relu":
            last = nodes[1].outputs[0].name

            def head(env):
                x = env[x_name].contiguous(memory_format=fmt)
                env[last] = finish(torch.cudnn_convolution_relu(x, w, b, stride, padding, dilation, groups))
            return _tail_runner(lc, head, 2)

        def head(env):
            x = env[x_name].contiguous(memory_format=fmt)
            env[out] = finish(F.conv2d(x, w, b, stride, padding, dilation, groups))
        return _tail_runner(lc, head, 1)

    def _with_triton_tail(self, lc: LayerContext, config: dict, fmt, w, b, geometry) -> Runner:
        """cuDNN's conv, then the tail as one kernel over its output, in its layout; the bias is
        added in the tail when the tail takes it (ConvTail.bias), else inside cuDNN."""
        from .triton.epilogue import ConvTail

        tail = ConvTail(lc)
        launch = tail.runner(config)
        conv_bias = None if tail.bias is not None else b

        def run(inputs: list[torch.Tensor], out: list | None = None) -> list[torch.Tensor]:
            # applies() made inputs[0] the conv's input
            y = F.conv2d(inputs[0].contiguous(memory_format=fmt), w, conv_bias, *geometry)
            return launch(y, inputs, out)
        return binds_outputs(run, output_binding(launch))  # cuDNN allocates the conv output itself


# -- matrix products: cuBLASLt with bias (+relu/gelu) epilogues ---------------------------------

class CublasLinearTactic(Tactic):
    """MatMul(x, W) [+ bias] [-> Relu/tanh-Gelu] as one addmm with a cuBLASLt epilogue; or
    (config tail="triton") addmm with the bias, then the rest of the Layer (erf GELU, residual
    Add, casts) as one generated Triton kernel (triton/epilogue.py MatmulTail).

    cuBLASLt's only GELU epilogue is the tanh form. Config gelu="tanh_approx" runs an erf GELU
    through it at half precision, outside strict builds: the two forms differ by at most
    4.7e-4 (at x = 2.70, where GELU is 2.69 and a float16 step is 2e-3), a quarter of the
    output's own rounding, and the epilogue saves the pass over the [M, N] output that a tail
    kernel costs (BERT-base b32: 12 x 16 us)."""

    name = "torch.cublas_linear"
    accepts_strided = True

    def _parts(self, lc: LayerContext, fuse_activation: bool = True, erf_as_tanh: bool = False):
        mm = lc.anchor
        if mm is None or mm is not lc.nodes[0] or mm.op_type not in ("MatMul", "Gemm") or not lc.is_weight(mm.inputs[1]):
            return None
        w = lc.weight(mm.inputs[1])
        if mm.op_type == "Gemm":
            return self._gemm_parts(lc, mm, w, fuse_activation)
        if w.dim() != 2 or not lc.inputs or lc.inputs[0] is not mm.inputs[0]:
            return None
        consumed, bias, act = 1, None, None
        out = mm.outputs[0]
        nodes = lc.nodes
        if len(nodes) > 1 and nodes[1].op_type == "Add":
            other = _other_input(nodes[1], out)
            if lc.is_weight(other) and lc.weight(other).numel() == w.shape[1]:
                bias, consumed, out = other, 2, nodes[1].outputs[0]
        if fuse_activation and bias is not None and len(nodes) > consumed:
            n = nodes[consumed]
            if n.op_type == "Relu" or (n.op_type == "Gelu" and (erf_as_tanh or n.attrs.get("approximate", "none") == "tanh")):
                act, consumed = n, consumed + 1
        return mm, w, bias, act, consumed

    def _erf_gelu_follows_bias(self, lc: LayerContext) -> bool:
        """The Layer goes on with an erf GELU right after the GEMM's bias (config gelu="tanh_approx")."""
        parts = self._parts(lc, fuse_activation=False)
        if parts is None or parts[2] is None or parts[-1] >= len(lc.nodes):
            return False
        n = lc.nodes[parts[-1]]
        return n.op_type == "Gelu" and n.attrs.get("approximate", "none") == "none"

    def _gemm_parts(self, lc: LayerContext, gemm: Node, w: torch.Tensor, fuse_activation: bool = True):
        """Gemm(x, W, c) with alpha = beta = 1, transA = 0 and a per-column bias c (or none)."""
        a = gemm.attrs
        if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0 or w.dim() != 2:
            return None
        if not lc.inputs or lc.inputs[0] is not gemm.inputs[0]:
            return None
        w = w.t() if a.get("transB", 0) else w
        c = gemm.inputs[2] if len(gemm.inputs) > 2 else None
        if c is not None and (not lc.is_weight(c) or lc.weight(c).numel() != w.shape[1]):
            return None
        consumed, act = 1, None
        if fuse_activation and c is not None and len(lc.nodes) > 1 and lc.nodes[1].op_type == "Relu":
            act, consumed = lc.nodes[1], 2
        return gemm, w.contiguous(), c, act, consumed

    def applies(self, lc: LayerContext) -> bool:
        return lc.device.type == "cuda" and lc.dtype in (torch.float16, torch.bfloat16, torch.float32) \
            and self._parts(lc) is not None

    def _tail(self, lc: LayerContext):
        """The rest of the Layer after the GEMM and its bias as one Triton kernel, or None."""
        parts = self._parts(lc, fuse_activation=False)
        if parts is None or parts[-1] >= len(lc.nodes):
            return None
        consumed = parts[-1]
        try:
            from .triton.epilogue import matmul_tail
        except ImportError:
            return None
        return matmul_tail(lc, lc.nodes[consumed - 1].outputs[0], consumed)

    def configs(self, lc: LayerContext) -> list[dict]:
        tail = self._tail(lc)
        configs = [{}] + ([{**tail.config(), "tail": "triton"}] if tail is not None else [])
        if lc.dtype in (torch.float16, torch.bfloat16) and not lc.strict and self._erf_gelu_follows_bias(lc):
            configs.append({"gelu": "tanh_approx"})
        return configs

    def compile(self, lc: LayerContext, config: dict) -> Runner:
        triton_tail = config.get("tail") == "triton"
        mm, w, bias, act, consumed = self._parts(lc, fuse_activation=not triton_tail,
                                                 erf_as_tanh=config.get("gelu") == "tanh_approx")
        b = lc.weight(bias).reshape(-1) if bias is not None else None
        x_name = mm.inputs[0].name
        last = lc.nodes[consumed - 1].outputs[0].name
        k, n = w.shape
        use_gelu = act is not None and act.op_type == "Gelu"

        def gemm(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
            # The same cuBLAS(Lt) calls write into a given contiguous `out` (its [M, n] view).
            x2 = x.reshape(-1, k)
            y = None if out is None else out.view(x2.shape[0], n)
            if b is None:
                y = torch.mm(x2, w, out=y)
            elif act is None:
                y = torch.addmm(b, x2, w, out=y)
            else:
                y = torch._addmm_activation(b, x2, w, use_gelu=use_gelu, out=y)
            return y.reshape(*x.shape[:-1], n) if out is None else out

        if triton_tail:
            launch = self._tail(lc).runner(config)

            def run(inputs: list[torch.Tensor], out: list | None = None) -> list[torch.Tensor]:
                return launch(gemm(inputs[0]), inputs, out)  # _parts made inputs[0] the GEMM's input
            return binds_outputs(run, output_binding(launch))
        if consumed == len(lc.nodes) and [v.name for v in lc.outputs] == [last]:
            shape, dtype = lc.shape(lc.outputs[0]), lc.outputs[0].type.dtype.torch

            def whole(inputs: list[torch.Tensor], out: list | None = None) -> list[torch.Tensor]:
                return [gemm(inputs[0], given_output(out, 0, shape, dtype))]
            return binds_outputs(whole, [True])

        def head(env):
            env[last] = gemm(env[x_name])
        return _tail_runner(lc, head, consumed)


# -- pooling: cuDNN pooling through torch -------------------------------------------------------

class TorchPoolTactic(Tactic):
    """2-D MaxPool/AveragePool with symmetric padding (no Indices output), and global pooling."""

    name = "torch.pool"
    accepts_strided = True

    def _pool(self, lc: LayerContext):
        node = lc.anchor
        if node is None or node is not lc.nodes[0] or lc.inputs[:1] != [node.inputs[0]]:
            return None
        if node.op_type in ("GlobalAveragePool", "GlobalMaxPool"):
            return node if len(lc.shape(node.inputs[0])) >= 3 else None
        if node.op_type not in ("MaxPool", "AveragePool") or len(lc.shape(node.inputs[0])) != 4:
            return None
        if len(node.outputs) > 1 or node.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            return None
        pads = list(node.attrs.get("pads", [0, 0, 0, 0]))
        if pads[:2] != pads[2:] or any(d != 1 for d in node.attrs.get("dilations", [1, 1])):
            return None
        k = node.attrs.get("kernel_shape")
        if k is None or any(p > kk // 2 for p, kk in zip(pads[:2], k)):
            return None  # torch requires pad <= kernel/2
        return node

    def applies(self, lc: LayerContext) -> bool:
        return lc.device.type == "cuda" and lc.dtype != torch.float64 and self._pool(lc) is not None

    def compile(self, lc: LayerContext, config: dict) -> Runner:
        node = self._pool(lc)
        x_name, out = node.inputs[0].name, node.outputs[0].name
        op = node.op_type
        if op.startswith("Global"):
            dims = tuple(range(2, len(lc.shape(node.inputs[0]))))

            def head(env):
                x = env[x_name]
                env[out] = x.mean(dims, keepdim=True) if op == "GlobalAveragePool" else x.amax(dims, keepdim=True)
            return _tail_runner(lc, head, 1)
        k = tuple(node.attrs["kernel_shape"])
        stride = tuple(node.attrs.get("strides", [1, 1]))
        pad = tuple(node.attrs.get("pads", [0, 0, 0, 0])[:2])
        ceil = bool(node.attrs.get("ceil_mode", 0))
        include_pad = bool(node.attrs.get("count_include_pad", 0))

        def head(env):
            x = env[x_name]
            if op == "MaxPool":
                env[out] = F.max_pool2d(x, k, stride, pad, ceil_mode=ceil)
            else:
                env[out] = F.avg_pool2d(x, k, stride, pad, ceil_mode=ceil, count_include_pad=include_pad)
        return _tail_runner(lc, head, 1)


register_tactic(CudnnConvTactic())
register_tactic(CublasLinearTactic())
register_tactic(TorchPoolTactic())

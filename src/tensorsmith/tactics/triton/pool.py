"""triton.pool: 2-D MaxPool / AveragePool and global average / max pooling as Triton kernels.

Half-precision CNNs run channels-last, where PyTorch's max pooling (max_pool_forward_nhwc) took
0.114 ms for ResNet-50's stem pool at batch 32 on an H200: 64 MB of traffic that needs ~15 us.
Here each program owns a tile of output pixels x channels; with NHWC memory the channel axis is
contiguous, so every tap of the window is one coalesced load of the tile. Strides come from the
tensors at run time, so one kernel serves NCHW and NHWC (it allocates its output in the
input's memory format). The global pools walk H*W in row tiles and reduce in float32.
"""

from __future__ import annotations

from typing import Any

import torch
import triton  # noqa: F401  (no triton, no tactic)

from ..base import (
    LayerContext,
    Runner,
    Tactic,
    binds_outputs,
    output_or_empty,
    register_tactic,
)
from ..torch_ops import _tail_runner
from .compile import load_kernel
from .tiles import on_triton_device

SOURCE = '''
import triton
import triton.language as tl


@triton.jit
def ts_pool2d(x_ptr, y_ptr, C, H, W, OH, OW, P,
              sxn, sxc, sxh, sxw, syn, syc, syh, syw,
              KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
              PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
              IS_MAX: tl.constexpr, COUNT_PAD: tl.constexpr,
              BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    pm = p < P
    cm = c < C
    ow = p % OW
    oh = (p // OW) % OH
    n = (p // (OW * OH)).to(tl.int64)
    base = x_ptr + n * sxn
    coff = (c * sxc)[None, :]
    if IS_MAX:
        acc = tl.full((BLOCK_P, BLOCK_C), float("-inf"), tl.float32)
    else:
        acc = tl.zeros((BLOCK_P, BLOCK_C), tl.float32)
    count = tl.zeros((BLOCK_P,), tl.float32)
    for kh in tl.static_range(KH):
        ih = oh * SH - PH + kh * DH
        for kw in tl.static_range(KW):
            iw = ow * SW - PW + kw * DW
            inside = pm & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            ptrs = base[:, None] + (ih * sxh + iw * sxw)[:, None] + coff
            mask = inside[:, None] & cm[None, :]
            if IS_MAX:
                v = tl.load(ptrs, mask=mask, other=float("-inf")).to(tl.float32)
                acc = tl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)
            else:
                v = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
                acc += v
                if COUNT_PAD:
                    in_padded = (ih >= -PH) & (ih < H + PH) & (iw >= -PW) & (iw < W + PW)
                    count += in_padded.to(tl.float32)
                else:
                    count += inside.to(tl.float32)
    if not IS_MAX:
        acc = acc / tl.maximum(count, 1.0)[:, None]
    out = y_ptr + (n * syn + oh * syh + ow * syw)[:, None] + (c * syc)[None, :]
    tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=pm[:, None] & cm[None, :])


@triton.jit
def ts_global_pool(x_ptr, y_ptr, C, sxn, sxc, sxh, sxw, syn, syc, W: tl.constexpr, HW: tl.constexpr,
                   IS_MAX: tl.constexpr, BLOCK_HW: tl.constexpr, BLOCK_C: tl.constexpr):
    n = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cm = c < C
    base = x_ptr + n * sxn + (c * sxc)[None, :]
    if IS_MAX:
        acc = tl.full((BLOCK_HW, BLOCK_C), float("-inf"), tl.float32)
    else:
        acc = tl.zeros((BLOCK_HW, BLOCK_C), tl.float32)
    # HW is a compile-time constant (shapes are static per build; the interpreter wants a plain loop bound).
    for start in range(0, HW, BLOCK_HW):
        hw = start + tl.arange(0, BLOCK_HW)
        ptrs = base + ((hw // W) * sxh + (hw % W) * sxw)[:, None]
        mask = (hw < HW)[:, None] & cm[None, :]
        if IS_MAX:
            acc = tl.maximum(acc, tl.load(ptrs, mask=mask, other=float("-inf")).to(tl.float32),
                             propagate_nan=tl.PropagateNan.ALL)
        else:
            acc += tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    if IS_MAX:
        r = tl.max(acc, axis=0)
    else:
        r = tl.sum(acc, axis=0) / HW
    tl.store(y_ptr + n * syn + c * syc, r.to(y_ptr.dtype.element_ty), mask=cm)
'''

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _pool_node(lc: LayerContext):
    """The Layer's leading pool node if this kernel family can run it, else None."""
    node = lc.anchor
    if node is None or node is not lc.nodes[0] or node.domain or lc.inputs[:1] != [node.inputs[0]]:
        return None
    if node.inputs[0].type is None or node.inputs[0].type.dtype is None or node.inputs[0].type.dtype.torch not in _FLOATS:
        return None
    if len(lc.shape(node.inputs[0])) != 4:
        return None
    if node.op_type in ("GlobalAveragePool", "GlobalMaxPool"):
        return node
    if node.op_type not in ("MaxPool", "AveragePool") or len(node.outputs) > 1:
        return None
    if node.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID") or "kernel_shape" not in node.attrs:
        return None
    if len(node.attrs["kernel_shape"]) != 2:
        return None
    return node


def _geometry(node) -> dict[str, int]:
    kh, kw = node.attrs["kernel_shape"]
    sh, sw = node.attrs.get("strides", [1, 1])
    dh, dw = node.attrs.get("dilations", [1, 1])
    pads = list(node.attrs.get("pads", [0, 0, 0, 0]))
    # The output shape (from inference, ceil_mode included) bounds the windows; the begin pads
    # place them. End pads only matter to count_include_pad's divisor, through the padded extent.
    return dict(KH=kh, KW=kw, SH=sh, SW=sw, PH=pads[0], PW=pads[1], DH=dh, DW=dw)


def _pow2_at_most(n: int, cap: int) -> int:
    return min(cap, 1 << max(0, (n - 1).bit_length()))


class TritonPool(Tactic):
    name = "triton.pool"
    accepts_strided = True  # strides are read from the tensors at run time

    def applies(self, lc: LayerContext) -> bool:
        if not on_triton_device(lc):
            return False
        node = _pool_node(lc)
        if node is None:
            return False
        if node.op_type == "AveragePool" and node.attrs.get("count_include_pad", 0):
            pads = list(node.attrs.get("pads", [0, 0, 0, 0]))
            return pads[:2] == pads[2:]  # the padded extent is symmetric
        return True

    def configs(self, lc: LayerContext) -> list[dict[str, Any]]:
        node = _pool_node(lc)
        c = lc.shape(node.inputs[0])[1]
        bc = _pow2_at_most(c, 64)
        if node.op_type.startswith("Global"):
            return [{"BLOCK_HW": hw, "BLOCK_C": bc, "num_warps": 4} for hw in (16, 64)]
        return [{"BLOCK_P": p, "BLOCK_C": bc, "num_warps": w} for p, w in ((16, 4), (32, 4), (64, 8))]

    def compile(self, lc: LayerContext, config: dict[str, Any]) -> Runner:
        node = _pool_node(lc)
        x_name, out_name = node.inputs[0].name, node.outputs[0].name
        out_shape = lc.shape(node.outputs[0])
        dtype = node.outputs[0].type.dtype.torch
        device = lc.device
        warps = int(config.get("num_warps", 4))
        bc = int(config["BLOCK_C"])
        is_max = node.op_type in ("MaxPool", "GlobalMaxPool")

        def output(x: torch.Tensor, out: list | None) -> torch.Tensor:
            """The output in the input's memory format: `out[0]` when it is so, else a new one."""
            fmt = torch.channels_last if (not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)) \
                else torch.contiguous_format
            return output_or_empty(out, 0, out_shape, dtype, device, fmt)

        if node.op_type.startswith("Global"):
            kernel = load_kernel(SOURCE, "ts_global_pool")
            bhw = int(config["BLOCK_HW"])

            def pool(x: torch.Tensor, out: list | None = None) -> torch.Tensor:
                n, c, h, w = x.shape
                y = output(x, out)
                kernel[(n, triton.cdiv(c, bc))](x, y, c, *x.stride(), y.stride(0), y.stride(1), W=w, HW=h * w,
                                                IS_MAX=is_max, BLOCK_HW=bhw, BLOCK_C=bc, num_warps=warps)
                return y
        else:
            kernel = load_kernel(SOURCE, "ts_pool2d")
            geo = _geometry(node)
            count_pad = bool(node.attrs.get("count_include_pad", 0))
            bp = int(config["BLOCK_P"])

            def pool(x: torch.Tensor, out: list | None = None) -> torch.Tensor:
                n, c, h, w = x.shape
                y = output(x, out)
                oh, ow = out_shape[2], out_shape[3]
                p = n * oh * ow
                kernel[(triton.cdiv(p, bp), triton.cdiv(c, bc))](
                    x, y, c, h, w, oh, ow, p, *x.stride(), *y.stride(), **geo,
                    IS_MAX=is_max, COUNT_PAD=count_pad, BLOCK_P=bp, BLOCK_C=bc, num_warps=warps)
                return y

        if len(lc.nodes) == 1 and [v.name for v in lc.outputs] == [out_name]:
            def run(inputs: list[torch.Tensor], out: list | None = None) -> list[torch.Tensor]:
                return [pool(inputs[0], out)]  # _pool_node made inputs[0] the pool's input
            return binds_outputs(run, [True])

        def head(env):
            env[out_name] = pool(env[x_name])
        return _tail_runner(lc, head, 1)


TRITON_POOL = register_tactic(TritonPool())

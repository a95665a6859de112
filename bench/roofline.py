"""How far each system is from the GPU's limits.

From the ONNX graph at a batch: the matrix FLOPs (Conv, ConvTranspose, MatMul, Gemm, Attention;
elementwise work is left out, so this is what tensor cores must do) and the fewest bytes any
engine must move (every weight read once, inputs read, outputs written, at the precision).
On the device, at the start of a run: the measured matrix peak (a large matmul) and the copy
bandwidth. A system's time against max(FLOPs / peak, bytes / bandwidth) is its roofline fraction.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, shape_inference

HALF_SIZE = {"fp16": 2, "bf16": 2, "fp32": 4, "tf32": 4}
_KEEP_DATA = 256      # small initializers keep their values: shape inference reads Reshape targets


@dataclass
class GraphCost:
    flops: int                 # 2 x multiply-adds of the matrix ops
    float_weights: int         # elements of float initializers (stored at the precision)
    other_weight_bytes: int    # integer/bool initializers, at their own size
    float_io: int              # elements of float inputs and outputs
    other_io_bytes: int
    counted_nodes: int
    unknown_nodes: list[str]   # matrix ops whose shapes inference could not give (FLOPs undercounted)

    def bytes_at(self, precision: str) -> int:
        floats = (self.float_weights + self.float_io) * HALF_SIZE[precision]
        return floats + self.other_weight_bytes + self.other_io_bytes

    def to_dict(self, precision: str) -> dict:
        d = asdict(self)
        d["bytes"] = self.bytes_at(precision)
        return d


def _is_float(elem_type: int) -> bool:
    return elem_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                         onnx.TensorProto.DOUBLE)


def _itemsize(elem_type: int) -> int:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).itemsize


def skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model without the data of large initializers: shape inference only needs their dims."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for t in m.graph.initializer:
        if math.prod(t.dims) > _KEEP_DATA:
            for f in ("raw_data", "float_data", "int32_data", "int64_data", "double_data"):
                t.ClearField(f)
            t.data_location = onnx.TensorProto.DEFAULT
            del t.external_data[:]
    return m


def _with_shapes(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]]) -> dict[str, list]:
    """Concrete shapes of every value, inferred after fixing the inputs' symbolic dims."""
    m = skeleton(model)
    del m.graph.value_info[:]
    for x in m.graph.input:
        if x.name in input_shapes:
            dims = x.type.tensor_type.shape.dim
            for d, n in zip(dims, input_shapes[x.name]):
                d.Clear()
                d.dim_value = int(n)
    for y in m.graph.output:      # outputs' symbolic dims would otherwise be kept as declared
        y.type.tensor_type.ClearField("shape")
    m = shape_inference.infer_shapes(m, data_prop=True)
    shapes = {}
    for vi in [*m.graph.input, *m.graph.value_info, *m.graph.output]:
        t = vi.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            shapes[vi.name] = [d.dim_value for d in t.shape.dim]
    for t in m.graph.initializer:
        shapes[t.name] = list(t.dims)
    return shapes


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _matmul_flops(a: list, b: list) -> int:
    if len(a) == 1:
        a = [1, *a]
    if len(b) == 1:
        b = [*b, 1]
    m, k, n = a[-2], a[-1], b[-1]
    batch = np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
    return 2 * math.prod(batch) * m * k * n


def node_flops(node: onnx.NodeProto, shapes: Mapping[str, list]) -> int | None:
    """2 x multiply-adds of one matrix op, None when a shape it needs is unknown; 0 for other ops."""
    op = node.op_type
    if op not in ("Conv", "ConvTranspose", "MatMul", "Gemm", "Attention", "FusedMatMul"):
        return 0
    got = [shapes.get(i) if i else None for i in node.input]
    out = shapes.get(node.output[0])
    if op in ("MatMul", "FusedMatMul"):
        return None if got[0] is None or got[1] is None else _matmul_flops(got[0], got[1])
    if op == "Gemm":
        if got[0] is None or got[1] is None:
            return None
        m, k = reversed(got[0]) if _attr(node, "transA", 0) else got[0]
        n = got[1][0] if _attr(node, "transB", 0) else got[1][1]
        return 2 * m * k * n
    if op == "Conv":
        if got[1] is None or out is None:
            return None
        w = got[1]      # [Cout, Cin/group, *kernel]: each output element takes prod(w[1:]) MACs
        return 2 * math.prod(out) * math.prod(w[1:])
    if op == "ConvTranspose":
        if got[0] is None or got[1] is None:
            return None
        w = got[1]      # [Cin, Cout/group, *kernel]: each input element feeds prod(w[1:]) MACs
        return 2 * math.prod(got[0]) * math.prod(w[1:])
    # Attention (opset 23): Q [B, Hq, S, D] or [B, S, Hq*D]; K [.., L, D]; V [.., L, Dv].
    q, k, v = got[:3] if len(got) >= 3 else (None, None, None)
    if q is None or k is None or v is None:
        return None
    if len(q) == 4:
        b, h, s, d = q
        seq_kv, dv = k[2], v[3]
    else:
        h = _attr(node, "q_num_heads", 1)
        b, s, d = q[0], q[1], q[2] // h
        seq_kv, dv = k[1], v[2] // _attr(node, "kv_num_heads", h)
    return 2 * b * h * s * seq_kv * (d + dv)


def graph_cost(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]]) -> GraphCost:
    """FLOPs and minimum traffic of `model` with its inputs at `input_shapes`."""
    shapes = _with_shapes(model, input_shapes)
    flops, counted, unknown = 0, 0, []
    nodes = list(model.graph.node)
    for node in nodes:
        f = node_flops(node, shapes)
        if f is None:
            unknown.append(node.name or node.op_type)
        elif f:
            flops += f
            counted += 1
    float_w = other_w = 0
    for t in model.graph.initializer:
        n = math.prod(t.dims)
        if _is_float(t.data_type):
            float_w += n
        else:
            other_w += n * _itemsize(t.data_type)
    for node in nodes:        # weights that the exporter left as Constant nodes
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            t = node.attribute[0].t
            n = math.prod(t.dims)
            if _is_float(t.data_type):
                float_w += n
            else:
                other_w += n * _itemsize(t.data_type)
    inits = {t.name for t in model.graph.initializer}
    float_io = other_io = 0
    for vi in [*model.graph.input, *model.graph.output]:
        if vi.name in inits:
            continue
        shape = shapes.get(vi.name)
        if shape is None:
            continue
        elem = vi.type.tensor_type.elem_type
        if _is_float(elem):
            float_io += math.prod(shape)
        else:
            other_io += math.prod(shape) * _itemsize(elem)
    return GraphCost(flops, float_w, other_w, float_io, other_io, counted, unknown)


def bound_ms(flops: int, nbytes: int, peak_tflops: float, bandwidth_gbps: float) -> float:
    """The roofline lower bound on time: the slower of doing the math and moving the bytes."""
    return max(flops / (peak_tflops * 1e12), nbytes / (bandwidth_gbps * 1e9)) * 1e3


def fractions(ms: float, flops: int, nbytes: int, peak_tflops: float, bandwidth_gbps: float) -> dict:
    """A system's achieved share of the matrix peak, of the bandwidth, and of the roofline bound."""
    s = ms * 1e-3
    return {"matrix_frac": flops / s / (peak_tflops * 1e12), "bandwidth_frac": nbytes / s / (bandwidth_gbps * 1e9),
            "roofline_frac": bound_ms(flops, nbytes, peak_tflops, bandwidth_gbps) / ms}


# --- device peaks --------------------------------------------------------------------------------

def _median_ms(fn, iters: int) -> float:
    import torch

    from tensorsmith.tuner import time_runner

    return time_runner(fn, torch.device("cuda"), warmup=3, repeats=iters)


def measure_matrix_peak(precision: str, n: int = 8192) -> float:
    """TFLOP/s of an n x n x n matmul in `precision` (fp16/bf16, or fp32 with TF32 on or off)."""
    import torch

    from .measure import HALF, precision_flags

    dtype = HALF.get(precision, torch.float32)
    with precision_flags(precision):
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        ms = _median_ms(lambda: torch.mm(a, b), iters=5 if precision == "fp32" else 20)
    return 2 * n**3 / (ms * 1e-3) / 1e12


def measure_copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """GB/s of a device-to-device copy, counting the read and the write."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = _median_ms(lambda: dst.copy_(src), iters=20)
    return 2 * nbytes / (ms * 1e-3) / 1e9


def measure_peaks(precisions: Sequence[str]) -> dict:
    """The device's limits, measured: the fp16 matrix peak always, and that of each precision run."""
    import torch

    peaks = {p: round(measure_matrix_peak(p), 1) for p in dict.fromkeys(["fp16", *precisions])}
    out = {"matrix_tflops": peaks, "copy_gbps": round(measure_copy_bandwidth(), 1)}
    torch.cuda.empty_cache()
    return out

"""Temporary: run every op model of the test files on CUDA and on the CPU; compare."""
import numpy as np, torch, ml_dtypes
from onnx import TensorProto
import tensorsmith
from tensorsmith.ops.interpreter import run_graph
from tests.ops.test_reduce import one_node_model as m

R = np.random.default_rng(0)
X = R.uniform(-3, 3, (3, 4, 5)).astype(np.float32)
A = lambda *v: np.array(v, np.int64)
cases = []
for op in ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]:
    for dt in [np.float32, np.float16, np.int32, np.int8, np.uint8, np.uint16, np.uint64]:
        cases.append(m(op, [("x", (np.abs(X) * 3).astype(dt)), ("c_a", A(0, 2))], keepdims=0))
    cases.append(m(op, [("x", np.zeros((2, 0), np.float32)), ("c_a", A(1))]))
cases.append(m("ReduceMax", [("x", X > 0), ("c_a", A(1))], opset=20))
t = R.integers(0, 4, (3, 5)).astype(np.int64)
for red in ["none", "sum", "mean"]:
    cases.append(m("SoftmaxCrossEntropyLoss", [("x", X), ("t", t), ("w", np.ones(4, np.float32))], n_out=2, opset=13, reduction=red, ignore_index=1))
    cases.append(m("NegativeLogLikelihoodLoss", [("x", X.astype(np.float16)), ("t", t)], opset=13, reduction=red))
s = np.array(0.05, np.float32)
for zp in [np.array(3, np.uint8), np.array(-3, np.int8), np.array(9, np.uint16), np.array(-9, np.int16)]:
    cases.append(m("QuantizeLinear", [("x", X), ("c_s", s), ("c_zp", zp)], opset=21))
for f8 in [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2]:
    for sat in [0, 1]:
        cases.append(m("QuantizeLinear", [("x", X * 1e4), ("c_s", s)], opset=21, output_dtype=f8, saturate=sat))
cases.append(m("QuantizeLinear", [("x", X), ("c_s", R.uniform(.1, 1, (3, 2, 5)).astype(np.float32))], opset=21, axis=1, block_size=3))
cases.append(m("DequantizeLinear", [("x", (X * 10).astype(np.int8)), ("c_s", np.ones(4, np.float16)), ("c_zp", np.ones(4, np.int8))], opset=21))
cases.append(m("DequantizeLinear", [("c_x", X.astype(ml_dtypes.float8_e4m3fn)), ("c_s", s)], opset=21))
cases.append(m("DynamicQuantizeLinear", [("x", X)], n_out=3, opset=11))
q = (np.abs(X) * 40).astype(np.uint8)
cases.append(m("MatMulInteger", [("a", q[0]), ("b", q[1].T), ("c_z", np.array(7, np.uint8))], opset=10))
cases.append(m("QLinearMatMul", [("a", q[0]), ("c_as", s), ("c_az", np.array(1, np.uint8)), ("b", q[1].T), ("c_bs", s), ("c_bz", np.array(2, np.uint8)), ("c_ys", s), ("c_yz", np.array(3, np.uint8))], opset=10))
x4 = q.reshape(1, 3, 4, 5)
w4 = q.reshape(-1)[:36].reshape(2, 3, 2, 3).copy()
cases.append(m("ConvInteger", [("x", x4), ("w", w4), ("c_z", np.array(5, np.uint8))], opset=10, auto_pad="SAME_UPPER"))
cases.append(m("QLinearConv", [("x", x4), ("c_xs", s), ("c_xz", np.array(1, np.uint8)), ("w", w4), ("c_ws", np.array([.02, .03], np.float32)), ("c_wz", np.zeros(2, np.uint8)), ("c_ys", s), ("c_yz", np.array(3, np.uint8))], opset=10, pads=[1, 1, 1, 1]))
import sys
DEV = sys.argv[1] if len(sys.argv) > 1 else "cuda"
bad = 0
for model, feeds in cases:
    g = tensorsmith.build(model).plan.graph
    f = {k: torch.from_numpy(v) for k, v in feeds.items()}
    cpu = run_graph(g, f)
    gpu = run_graph(g, {k: v.to(DEV) for k, v in f.items()}, device=DEV)
    for a, b in zip(cpu, gpu):
        b = b.cpu()
        ok = a.dtype == b.dtype and a.shape == b.shape and torch.allclose(a.double(), b.double(), rtol=1e-3, atol=1e-3, equal_nan=True)
        if not ok:
            bad += 1
            print("MISMATCH", model.graph.node[0].op_type, feeds and {k: v.dtype for k, v in feeds.items()}, a.dtype, b.dtype, a.flatten()[:6], b.flatten()[:6])
print(len(cases), "cases,", bad, "mismatches")

"""Temporary: the ONNX conformance cases of the nn/normalization/vision ops, interpreted on CUDA."""
import sys

import numpy as np
import torch

sys.path[:0] = ["src"]
import tensorsmith  # noqa: E402
from tensorsmith.ops.interpreter import run_graph  # noqa: E402
from tensorsmith.testing.conformance import _all_op_types, case_op, collect_cases  # noqa: E402

MINE = set("""Conv ConvTranspose AveragePool MaxPool GlobalAveragePool GlobalMaxPool GlobalLpPool LpPool MaxUnpool
MaxRoiPool Gemm MatMul Einsum Dropout Softmax LogSoftmax Hardmax BatchNormalization InstanceNormalization
LayerNormalization GroupNormalization RMSNormalization LRN LpNormalization MeanVarianceNormalization Resize Upsample
GridSample AffineGrid RoiAlign DeformConv Col2Im""".split())
ok = bad = 0
for case in collect_cases():
    ops = _all_op_types(case.model.graph)
    if case_op(case.name, ops) not in MINE or len(ops) > 1:
        continue
    try:
        g = tensorsmith.import_onnx(case.model)
        for inputs, outputs in case.data_sets:
            feeds = {v.name: torch.from_numpy(np.ascontiguousarray(x).reshape(np.shape(x))).cuda()
                     for v, x in zip(g.inputs, inputs)}
            res = run_graph(g, feeds, device="cuda")
            for e, a in zip(outputs, res):
                assert a.device.type == "cuda"
                a = a.cpu()
                a = a.float().numpy() if a.dtype == torch.bfloat16 else a.numpy()
                e = np.asarray(e).astype(a.dtype) if str(np.asarray(e).dtype) == "bfloat16" else np.asarray(e)
                assert a.dtype == e.dtype, (a.dtype, e.dtype)
                np.testing.assert_allclose(a, e, rtol=case.rtol, atol=case.atol)
        ok += 1
    except Exception as ex:  # report and go on
        bad += 1
        print("FAIL", case.name, type(ex).__name__, str(ex)[:300].replace("\n", " "))
print(f"{ok} passed, {bad} failed on {torch.cuda.get_device_name(0)}")

"""Attributes that later opsets turned into inputs.

The importer rewrites an old-opset node into the newest signature, so that each op's
reference and every pass sees one form. Each rule: (op, first opset with the input form,
[(attribute, input index, dtype)]).
"""

from __future__ import annotations

import torch

_REDUCE_18 = [
    "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
]

ATTRS_TO_INPUTS: dict[str, tuple[int, list[tuple[str, int, torch.dtype]]]] = {
    "Split": (13, [("split", 1, torch.int64)]),
    "Squeeze": (13, [("axes", 1, torch.int64)]),
    "Unsqueeze": (13, [("axes", 1, torch.int64)]),
    "ReduceSum": (13, [("axes", 1, torch.int64)]),
    **{op: (18, [("axes", 1, torch.int64)]) for op in _REDUCE_18},
    "Slice": (10, [("starts", 1, torch.int64), ("ends", 2, torch.int64), ("axes", 3, torch.int64)]),
    "Pad": (11, [("pads", 1, torch.int64), ("paddings", 1, torch.int64), ("value", 2, torch.float32)]),
    "Clip": (11, [("min", 1, torch.float32), ("max", 2, torch.float32)]),
    "TopK": (10, [("k", 1, torch.int64)]),
    "Dropout": (12, [("ratio", 1, torch.float32)]),
    "Upsample": (9, [("scales", 1, torch.float32)]),
}

# Scalars that the input form expects as 1-D tensors.
_ONE_D = {("TopK", "k")}
# Scalars that the input form expects as 0-D tensors.
_SCALAR = {("Pad", "value"), ("Clip", "min"), ("Clip", "max"), ("Dropout", "ratio")}


def attrs_to_inputs(op_type: str, opset: int, attrs: dict) -> list[tuple[int, torch.Tensor]]:
    """Pop the legacy attributes of a node; return (input index, tensor) for each one found."""
    rule = ATTRS_TO_INPUTS.get(op_type)
    if rule is None or opset >= rule[0]:
        return []
    moved = []
    for name, index, dtype in rule[1]:
        if name not in attrs:
            continue
        value = attrs.pop(name)
        if (op_type, name) in _SCALAR:
            t = torch.tensor(value, dtype=dtype)
        elif (op_type, name) in _ONE_D:
            t = torch.tensor([value], dtype=dtype)
        else:
            t = torch.tensor(list(value), dtype=dtype)
        moved.append((index, t))
    # Clip-6 defaults were the float limits; the input form defaults to "no bound".
    return moved


def remap_inputs(op_type: str, opset: int, inputs: list) -> list:
    """Input lists whose positions moved between opsets."""
    if op_type == "Resize" and opset < 11:
        # Resize-10 is (X, scales); Resize-11 is (X, roi, scales, sizes).
        return [inputs[0], None, *inputs[1:]]
    return inputs

"""torch.view: Gather with constant indices as a view of its input, computed at compile time.

The reference Gather normalizes its indices on the device every run (compare, add, where) and
then copies with index_select: four kernels. Exporters emit one Gather per selected tensor of a
packed projection (ViT's `qkv[0]`, `qkv[1]`, `qkv[2]`), so ViT-B/16 ran 37 of them per call.
With the indices known when the Layer is compiled, a scalar index is `select` and a run of
consecutive indices is `narrow`: views, no kernel at all; other constant indices are one
index_select with the indices normalized once.
"""

from __future__ import annotations

import torch

from .base import LayerContext, Runner, Tactic, register_tactic


def _constant_indices(lc: LayerContext) -> tuple[int, torch.Tensor] | None:
    """(axis, int64 indices on the host, normalized) of a one-node constant-index Gather Layer."""
    if len(lc.nodes) != 1:
        return None
    node = lc.nodes[0]
    if node.op_type != "Gather" or node.domain or not lc.inputs or lc.inputs[0] is not node.inputs[0]:
        return None
    if not lc.is_weight(node.inputs[1]):
        return None
    shape = lc.shape(node.inputs[0])
    axis = node.attrs.get("axis", 0)
    axis = axis + len(shape) if axis < 0 else axis
    idx = lc.weight(node.inputs[1]).detach().to("cpu", torch.int64)
    idx = torch.where(idx < 0, idx + shape[axis], idx)
    if idx.numel() and (idx.min() < 0 or idx.max() >= shape[axis]):
        return None  # out of range: the reference reports it
    return axis, idx


def _consecutive(idx: torch.Tensor) -> bool:
    flat = idx.reshape(-1)
    return flat.numel() > 0 and bool((flat == flat[0] + torch.arange(flat.numel())).all())


class ConstantGather(Tactic):
    name = "torch.view"
    accepts_strided = True  # views of any layout

    def applies(self, lc: LayerContext) -> bool:
        return _constant_indices(lc) is not None

    def compile(self, lc: LayerContext, config: dict) -> Runner:
        axis, idx = _constant_indices(lc)
        out_shape = lc.shape(lc.outputs[0])
        if idx.dim() == 0:
            i = int(idx)
            return lambda inputs: [inputs[0].select(axis, i)]
        if _consecutive(idx):
            start, n = int(idx.reshape(-1)[0]), idx.numel()
            return lambda inputs: [inputs[0].narrow(axis, start, n).reshape(out_shape)]
        device_idx = idx.reshape(-1).to(lc.device)
        return lambda inputs: [inputs[0].index_select(axis, device_idx).reshape(out_shape)]


register_tactic(ConstantGather())

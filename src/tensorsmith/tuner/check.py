"""Random inputs for a Layer and the check of a tactic's outputs against the reference."""

from __future__ import annotations

import torch

from ..tactics import LayerContext

# Tolerances by compute precision: what a correct kernel with a different summation order
# and fused rounding reaches on inputs of magnitude ~1.
TOLERANCES = {
    torch.float32: (1e-3, 1e-4),   # tf32 may be allowed for float32 builds
    torch.float16: (2e-2, 2e-2),
    torch.bfloat16: (5e-2, 5e-2),
}


def memory_format_of(t: torch.Tensor) -> str:
    """'channels_last' for a 4-D tensor laid out NHWC (and not also NCHW-contiguous), else 'contiguous'."""
    if t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last):
        return "channels_last"
    return "contiguous"


def random_inputs(lc: LayerContext, seed: int = 0, formats: list[str] | None = None) -> list[torch.Tensor]:
    """Inputs of the layer's shapes and dtypes: normal floats, small non-negative ints, random bools;
    laid out as the run will hand them over (`formats`, from the layers that produce them)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    out = []
    for i, v in enumerate(lc.inputs):
        shape = lc.shape(v)
        dt = v.type.dtype.torch
        if dt.is_floating_point:
            t = torch.randn(shape, generator=g).to(dt)
        elif dt == torch.bool:
            t = torch.rand(shape, generator=g) > 0.5
        else:
            t = torch.randint(0, 3, shape, generator=g).to(dt)
        t = t.to(lc.device)
        if formats is not None and formats[i] == "channels_last":
            t = t.contiguous(memory_format=torch.channels_last)
        out.append(t)
    return out


def max_violation(got: list[torch.Tensor], want: list[torch.Tensor], rtol: float, atol: float) -> float:
    """How far outside |got - want| <= atol + rtol*|want| the worst element is (<= 0 means inside)."""
    worst = float("-inf")
    for a, b in zip(got, want):
        if a.shape != b.shape or a.dtype != b.dtype:
            return float("inf")
        if not a.dtype.is_floating_point:
            worst = max(worst, 0.0 if torch.equal(a, b) else float("inf"))
            continue
        a, b = a.double(), b.double()
        nan = torch.isnan(a) != torch.isnan(b)
        if nan.any():
            return float("inf")
        finite = ~torch.isnan(b)
        excess = (a - b).abs()[finite] - (atol + rtol * b.abs()[finite])
        worst = max(worst, float(excess.max()) if excess.numel() else 0.0)
    return worst


def outputs_match(got: list[torch.Tensor], want: list[torch.Tensor], dtype: torch.dtype) -> bool:
    rtol, atol = TOLERANCES.get(dtype, TOLERANCES[torch.float32])
    return max_violation(got, want, rtol, atol) <= 0

"""Attention-family ops: Attention (opset 23+) and RotaryEmbedding.

Attention follows the ONNX formulation step by step (Q and K each scaled by sqrt(scale),
matmul, softcap, additive bias from mask/causal/window/padding, softmax, matmul), so that
it runs on any device and rounds where the ONNX reference rounds. A fused
scaled_dot_product_attention path belongs to a device target, not to this reference.
"""

from __future__ import annotations

import math

import torch

from ..ir import DType, TensorType
from .registry import InferContext, register, same_as

# qk_matmul_output_mode values
_QK_RAW, _QK_SOFTCAP, _QK_BIAS, _QK_SOFTMAX = 0, 1, 2, 3


def _split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    b, s, hidden = x.shape
    if hidden % num_heads:
        raise ValueError(f"hidden size {hidden} is not a multiple of the number of heads {num_heads}")
    return x.reshape(b, s, num_heads, hidden // num_heads).transpose(1, 2)


def _as_4d(ctx, q, k, v):
    q_heads, kv_heads = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    if not q.dim() == k.dim() == v.dim() or q.dim() not in (3, 4):
        raise ValueError(f"Q, K and V must all be 3-D or all 4-D, got ranks {q.dim()}, {k.dim()}, {v.dim()}")
    if q.dim() == 4:
        return q, k, v
    if not q_heads or not kv_heads:
        raise ValueError("3-D Q/K/V need the q_num_heads and kv_num_heads attributes")
    return _split_heads(q, q_heads), _split_heads(k, kv_heads), _split_heads(v, kv_heads)


def _allowed_positions(q_len: int, kv_len: int, offset, device, rule) -> torch.Tensor:
    """Boolean (q, kv), or (batch, 1, q, kv) for a per-batch offset, from rule(query_pos, key_index)."""
    i = torch.arange(q_len, device=device).reshape(q_len, 1)
    j = torch.arange(kv_len, device=device).reshape(1, kv_len)
    if isinstance(offset, torch.Tensor):
        pos = i + offset.reshape(-1, 1, 1, 1).to(torch.int64)
    else:
        pos = i + offset
    return rule(pos, j)


def _bias_from(allowed: torch.Tensor, dtype) -> torch.Tensor:
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, torch.full((), -math.inf, dtype=dtype, device=allowed.device))


def _mask_bias(attn_mask: torch.Tensor, kv_len: int, dtype) -> torch.Tensor:
    """attn_mask as an additive bias; a mask shorter than the keys is padded with 'masked'.

    A rank-0 mask has no key axis to pad: it broadcasts like any other.
    """
    pad = kv_len - attn_mask.shape[-1] if attn_mask.dim() else 0
    if pad > 0:
        fill = False if attn_mask.dtype == torch.bool else -math.inf
        attn_mask = torch.nn.functional.pad(attn_mask, (0, pad), value=fill)
    if attn_mask.dtype == torch.bool:
        return _bias_from(attn_mask, dtype)
    return attn_mask.to(dtype)


def _attention_bias(ctx, q_len, kv_len, attn_mask, past_len, nonpad, batch, dtype, device) -> torch.Tensor:
    """The additive bias: attn_mask + causal frontier + sliding window + key padding."""
    bias = torch.zeros((q_len, kv_len), dtype=dtype, device=device)
    if attn_mask is not None:
        bias = bias + _mask_bias(attn_mask, kv_len, dtype)
    # Causal and window masks are offset-aligned: the query block follows `offset` valid keys.
    if past_len is not None:
        offset = past_len
    elif nonpad is not None:
        offset = nonpad.reshape(-1).to(torch.int64) - q_len
    else:
        offset = 0
    if ctx.attr("is_causal", 0):
        bias = bias + _bias_from(_allowed_positions(q_len, kv_len, offset, device, lambda p, j: j <= p), dtype)
    left, right = ctx.attr("left_window_size", -1), ctx.attr("right_window_size", -1)
    if left < -1 or right < -1:
        raise ValueError(f"window sizes must be -1 or nonnegative, got left={left} right={right}")
    if left >= 0 or right >= 0:
        def in_window(p, j):
            ok = torch.ones_like(p - j, dtype=torch.bool)
            if left >= 0:
                ok = ok & (p - j <= left)
            if right >= 0:
                ok = ok & (j - p <= right)
            return ok

        bias = bias + _bias_from(_allowed_positions(q_len, kv_len, offset, device, in_window), dtype)
    if nonpad is not None:
        keys = torch.arange(kv_len, device=device).reshape(1, kv_len)
        valid = keys < nonpad.reshape(-1, 1).to(torch.int64)
        bias = bias + _bias_from(valid, dtype).reshape(batch, 1, 1, kv_len)
    return bias


def _row_sum(e: torch.Tensor) -> torch.Tensor:
    """Sum over the last axis, keepdim, rounded like the ONNX reference.

    torch accumulates bfloat16 sums in float32; the reference (numpy with ml_dtypes) adds
    bfloat16 values one at a time, rounding after each add, and the conformance tolerance
    (rtol 1e-3, below one bfloat16 ulp) tells the two apart. float16 and wider types are
    summed in float32 or better by both.
    """
    if e.dtype != torch.bfloat16:
        return e.sum(dim=-1, keepdim=True)
    s = e[..., :1]
    for j in range(1, e.shape[-1]):
        s = s + e[..., j:j + 1]
    return s


def _softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis in x's dtype; an all -inf row gives zeros, not NaN."""
    x_max = x.amax(dim=-1, keepdim=True)
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    e = torch.exp(x - torch.where(torch.isneginf(x_max), zero, x_max))
    s = _row_sum(e)
    return e / torch.where(s == 0, torch.ones((), dtype=x.dtype, device=x.device), s)


def _repeat_kv(k, v, q_heads):
    """Grouped-query attention: each KV head serves q_heads / kv_heads consecutive query heads."""
    kv_heads = k.shape[1]
    if q_heads == kv_heads:
        return k, v
    if kv_heads == 0 or q_heads % kv_heads or v.shape[1] != kv_heads:
        raise ValueError(f"q_num_heads ({q_heads}) must be a multiple of kv_num_heads ({kv_heads})")
    reps = q_heads // kv_heads
    return k.repeat_interleave(reps, dim=1), v.repeat_interleave(reps, dim=1)


def _dim_sum(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return f"{a}+{b}"


def _dim_div(a, n):
    return a // n if isinstance(a, int) and n else f"{a}/{n}"


def _dim_mul(n, a):
    return n * a if isinstance(a, int) else f"{n}*{a}"


def _attention_infer(ctx: InferContext) -> list[TensorType]:
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    past = ctx.input(4)
    dtype = q.dtype if q else None
    y = kv = qk = None
    if q and k and v and q.shape is not None and k.shape is not None and v.shape is not None:
        if len(q.shape) == 4:
            b, hq, sq = q.shape[:3]
            hk, sk, dk = k.shape[1], k.shape[2], k.shape[3]
            dv = v.shape[3]
        else:
            nq, nk = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
            if not nq or not nk:
                raise ctx.fail("3-D Q/K/V need the q_num_heads and kv_num_heads attributes")
            b, sq, hq = q.shape[0], q.shape[1], nq
            hk, sk = nk, k.shape[1]
            dk, dv = _dim_div(k.shape[2], nk), _dim_div(v.shape[2], nk)
        total = sk if past is None or past.shape is None else _dim_sum(past.shape[2], sk)
        y = (b, hq, sq, dv) if len(q.shape) == 4 else (b, sq, _dim_mul(hq, dv))
        kv = ((b, hk, total, dk), (b, hk, total, dv))
        qk = (b, hq, sq, total)
    out = [
        TensorType(dtype, y),
        TensorType(dtype, kv[0] if kv else None),
        TensorType(dtype, kv[1] if kv else None),
        TensorType(dtype, qk),
    ]
    return out[: ctx.num_outputs]


@register("Attention", infer=_attention_infer, since=23)
def attention(ctx, q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None):
    if (past_key is None) != (past_value is None):
        raise ValueError("past_key and past_value must be given together")
    if nonpad_kv_seqlen is not None and past_key is not None:
        raise ValueError("nonpad_kv_seqlen cannot be combined with past_key/past_value")
    rank = q.dim()
    q, k, v = _as_4d(ctx, q, k, v)
    dtype = q.dtype
    scale = ctx.attr("scale")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[3])
    # Q and K are each scaled by sqrt(scale), rounded to the input type, as ONNX specifies.
    root = torch.tensor(math.sqrt(scale), dtype=dtype, device=q.device)

    present_key = k if past_key is None else torch.cat([past_key, k], dim=2)
    present_value = v if past_value is None else torch.cat([past_value, v], dim=2)
    batch, q_heads, q_len = q.shape[0], q.shape[1], q.shape[2]
    kv_len = present_key.shape[2]
    bias = _attention_bias(ctx, q_len, kv_len, attn_mask, None if past_key is None else past_key.shape[2],
                           nonpad_kv_seqlen, batch, dtype, q.device)
    k_all, v_all = _repeat_kv(present_key, present_value, q_heads)

    qk = torch.matmul(q * root, (k_all * root).transpose(-1, -2))
    mode = ctx.attr("qk_matmul_output_mode", _QK_RAW)
    qk_out = qk
    softcap = ctx.attr("softcap", 0.0)
    if softcap > 0:
        qk = torch.tanh(qk / softcap) * softcap
    if mode == _QK_SOFTCAP:
        qk_out = qk
    scores = qk + bias
    if mode == _QK_BIAS:
        qk_out = scores

    precision = ctx.attr("softmax_precision")
    if precision is not None:
        scores = scores.to(DType.from_onnx(precision, "softmax_precision").torch)
    probs = _softmax(scores)
    # A query row with no attendable key (its bias is all -inf) gives a zero row, decided on the
    # bias rather than on the logits, which may be NaN there.
    row_masked = torch.isneginf(bias.amax(dim=-1, keepdim=True))
    probs = torch.where(row_masked, torch.zeros((), dtype=probs.dtype, device=probs.device), probs)
    if mode == _QK_SOFTMAX:
        qk_out = probs
    elif mode not in (_QK_RAW, _QK_SOFTCAP, _QK_BIAS):
        raise ValueError(f"qk_matmul_output_mode must be 0..3, got {mode}")

    y = torch.matmul(probs.to(dtype), v_all)
    if rank == 3:
        y = y.transpose(1, 2).reshape(batch, q_len, -1)
    return y, present_key, present_value, qk_out.to(dtype)



@register("RotaryEmbedding", infer=same_as(0), since=23)
def rotary_embedding(ctx, x, cos_cache, sin_cache, position_ids=None):
    shape = x.shape
    # Work in (batch, seq, heads, head_size).
    if x.dim() == 4:
        x = x.transpose(1, 2)
    elif x.dim() == 3:
        heads = ctx.attr("num_heads", 0)
        if not heads or shape[2] % heads:
            raise ValueError(f"3-D input needs num_heads dividing its hidden size {shape[2]}, got {heads}")
        x = x.reshape(shape[0], shape[1], heads, shape[2] // heads)
    else:
        raise ValueError(f"RotaryEmbedding input must be 3-D or 4-D, got rank {x.dim()}")
    rot = ctx.attr("rotary_embedding_dim", 0) or x.shape[3]
    if rot % 2 or rot > x.shape[3]:
        raise ValueError(f"rotary_embedding_dim {rot} must be even and at most the head size {x.shape[3]}")
    if position_ids is not None:
        cos_cache, sin_cache = cos_cache[position_ids.to(torch.int64)], sin_cache[position_ids.to(torch.int64)]
    for name, c in (("cos_cache", cos_cache), ("sin_cache", sin_cache)):
        if c.shape[-1] != rot // 2:
            raise ValueError(f"last dim of {name} is {c.shape[-1]}, expected rotary_embedding_dim/2 = {rot // 2}")
    cos, sin = cos_cache.unsqueeze(2), sin_cache.unsqueeze(2)
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    if ctx.attr("interleaved", 0):
        x1, x2 = x_rot[..., 0::2], x_rot[..., 1::2]
    else:
        x1, x2 = x_rot[..., : rot // 2], x_rot[..., rot // 2:]
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if ctx.attr("interleaved", 0):
        x_rot = torch.stack([real, imag], dim=-1).reshape(x_rot.shape)
    else:
        x_rot = torch.cat([real, imag], dim=-1)
    out = torch.cat([x_rot, x_pass], dim=-1)
    return out.reshape(shape) if len(shape) == 3 else out.transpose(1, 2)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float16/bfloat16 are computed in float32; wider floats in their own type."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


@register("CausalConvWithState", since=27)
def causal_conv_with_state(ctx, x, weight, bias=None, past_state=None):
    """Depthwise causal conv1d over (batch, channels, length) with a carried left context."""
    activation = ctx.attr("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise ValueError(f"activation must be 'none', 'silu' or 'swish', got '{activation}'")
    if x.dim() != 3 or weight.dim() != 3:
        raise ValueError(f"input and weight must be rank 3, got shapes {tuple(x.shape)} and {tuple(weight.shape)}")
    batch, channels, _ = x.shape
    k = weight.shape[2]
    if past_state is None:
        past_state = torch.zeros((batch, channels, k - 1), dtype=x.dtype, device=x.device)
    padded = torch.cat([past_state.to(x.dtype), x], dim=2)
    cdt = _compute_dtype(x.dtype)
    out = torch.nn.functional.conv1d(
        padded.to(cdt), weight.to(cdt), None if bias is None else bias.to(cdt), groups=channels)
    out = out.to(x.dtype)
    if activation != "none":
        f = out.to(torch.float32)
        out = (f * torch.sigmoid(f)).to(x.dtype)
    return out, padded[:, :, padded.shape[2] - (k - 1):]


def _heads_4d(x: torch.Tensor, heads: int, name: str) -> torch.Tensor:
    if x.dim() != 3:
        raise ValueError(f"{name} must be rank 3 (batch, seq, heads * size), got shape {tuple(x.shape)}")
    return _split_heads(x, heads)


@register("LinearAttention", since=27)
def linear_attention(ctx, query, key, value, past_state=None, decay=None, beta=None):
    """Recurrent linear attention: a (d_k, d_v) state per KV head, updated token by token in float32."""
    rule = ctx.attr("update_rule", "gated_delta")
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ValueError(f"update_rule must be linear, gated, delta or gated_delta, got '{rule}'")
    hq, hkv = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    if not hq or not hkv or hq <= 0 or hkv <= 0 or hq % hkv:
        raise ValueError(f"q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv})")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != (decay is not None):
        raise ValueError(f"update_rule '{rule}' {'requires' if gating else 'forbids'} the decay input")
    if delta != (beta is not None):
        raise ValueError(f"update_rule '{rule}' {'requires' if delta else 'forbids'} the beta input")
    f32 = torch.float32
    q = _heads_4d(query, hq, "query").to(f32)
    k = _heads_4d(key, hkv, "key").to(f32)
    v = _heads_4d(value, hkv, "value").to(f32)
    b, _, t, d_k = k.shape
    d_v = v.shape[3]
    if decay is not None:
        if decay.dim() != 3 or decay.shape[-1] not in (hkv, hkv * d_k):
            raise ValueError(f"decay must be (batch, seq, {hkv} or {hkv * d_k}), got {tuple(decay.shape)}")
        decay = (decay.reshape(b, t, hkv, 1).transpose(1, 2) if decay.shape[-1] == hkv
                 else _split_heads(decay, hkv)).to(f32)
    if beta is not None:
        if beta.dim() != 3 or beta.shape[-1] not in (hkv, 1):
            raise ValueError(f"beta must be (batch, seq, {hkv} or 1), got {tuple(beta.shape)}")
        beta = beta.reshape(b, t, beta.shape[-1], 1).transpose(1, 2).to(f32)
    if past_state is not None:
        if tuple(past_state.shape) != (b, hkv, d_k, d_v):
            raise ValueError(f"past_state shape {tuple(past_state.shape)} is not {(b, hkv, d_k, d_v)}")
        state_dtype, state = past_state.dtype, past_state.to(f32)
    else:
        state_dtype, state = query.dtype, torch.zeros((b, hkv, d_k, d_v), dtype=f32, device=query.device)
    scale = ctx.attr("scale") or 1.0 / math.sqrt(d_k)
    group = hq // hkv
    outs = []
    for i in range(t):
        k_t, v_t = k[:, :, i], v[:, :, i]
        if gating:
            state = state * torch.exp(decay[:, :, i]).unsqueeze(-1)
        if delta:
            v_t = beta[:, :, i] * (v_t - torch.einsum("bhdm,bhd->bhm", state, k_t))
        state = state + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)
        read = state if group == 1 else state.repeat_interleave(group, dim=1)
        outs.append(scale * torch.einsum("bhd,bhdm->bhm", q[:, :, i], read))
    out = torch.stack(outs, dim=2) if outs else torch.zeros((b, hq, 0, d_v), dtype=f32, device=query.device)
    out = out.transpose(1, 2).reshape(b, t, hq * d_v).to(query.dtype)
    return out, state.to(state_dtype)


def _flex_infer(ctx: InferContext) -> list[TensorType]:
    q, v = ctx.input(0), ctx.input(2)
    shape = None
    if q and v and q.shape is not None and v.shape is not None:
        shape = (*q.shape[:3], v.shape[3])
    return [TensorType(v.dtype if v else None, shape)]


def _apply_mod(ctx, name: str, x: torch.Tensor) -> torch.Tensor:
    graph = ctx.attr(name)
    if graph is None:
        return x
    outs = ctx.run_subgraph(graph, [x])
    if len(outs) != 1:
        raise ValueError(f"{name} must produce exactly one output, got {len(outs)}")
    return outs[0].to(x.dtype)


@register("FlexAttention", domain="ai.onnx.preview", infer=_flex_infer)
def flex_attention(ctx, q, k, v):
    """Attention whose scores and probabilities pass through user subgraphs (score_mod, prob_mod)."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"FlexAttention needs rank-4 Q, K, V, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2] or k.shape[3] != q.shape[3]:
        raise ValueError(f"incompatible Q/K/V shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    scale = ctx.attr("scale")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[3])
    # The reference takes sqrt in float32 and rounds it to the input type.
    root = torch.tensor(scale, dtype=torch.float32, device=q.device).sqrt().to(q.dtype)
    k, v = _repeat_kv(k, v, q.shape[1])
    precision = ctx.attr("softmax_precision")
    cdt = DType.from_onnx(precision, "softmax_precision").torch if precision is not None else _compute_dtype(q.dtype)
    scores = torch.matmul(q * root, (k * root).transpose(-1, -2)).to(cdt)
    scores = _apply_mod(ctx, "score_mod", scores)
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    probs = _apply_mod(ctx, "prob_mod", e / e.sum(dim=-1, keepdim=True))
    return torch.matmul(probs, v.to(cdt)).to(v.dtype)

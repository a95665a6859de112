"""Type and shape inference over a graph, with propagation of small constants.

Each node's rule comes from the registry. Ops without a rule are inferred by running their
reference on meta tensors (shapes only, no data); nodes whose inputs are all known small
constants are evaluated for real, so that shape subgraphs (Shape -> Gather -> Concat ->
Reshape) give static shapes downstream.
"""

from __future__ import annotations

import itertools

import torch

from ..errors import ShapeInferenceError, TensorsmithError
from ..ir import DType, Graph, Node, TensorType
from .registry import InferContext, OpDef, RunContext, lookup

# Inputs larger than this are not evaluated at build time: the point is shape values, not weights.
CONST_EVAL_LIMIT = 4096
_anon = itertools.count()
# References may loop in Python over a dim (RNN steps, NMS boxes); tracing one must stay quick.
_META_DIM_LIMIT = 1 << 16


def fresh_dim() -> str:
    return f"unk{next(_anon)}"


def _meta_infer(op: OpDef, ctx: InferContext) -> list[TensorType]:
    """Run the reference on meta tensors of the input shapes (symbols taken as 2).

    Constant inputs go in as meta tensors too: evaluating for real could allocate an output of
    any size. Ops whose output shape depends on input values declare their own rule.
    """
    args = []
    symbolic = False
    for i, t in enumerate(ctx.inputs):
        if t is None:
            args.append(None)
            continue
        if t.dtype is None or t.shape is None:
            raise LookupError("unknown input type")
        dims = []
        for d in t.shape:
            symbolic |= isinstance(d, str)
            dims.append(d if isinstance(d, int) else 2)
        if any(d > _META_DIM_LIMIT for d in dims):
            raise LookupError("dims too large to trace")  # a reference may loop over a dim
        args.append(torch.empty(dims, dtype=t.dtype.torch, device="meta"))
    res = op.reference(RunContext(ctx.node), *args)
    res = res if isinstance(res, (tuple, list)) else (res,)
    out = []
    for r in res[: ctx.num_outputs]:
        shape = tuple(r.shape)
        if symbolic:
            shape = tuple(fresh_dim() for _ in shape)
        out.append(TensorType(DType.from_torch(r.dtype), shape))
    return out


def infer_node(node: Node, input_types: list[TensorType | None], consts: list[torch.Tensor | None]) -> list[TensorType]:
    op = lookup(node.op_type, node.domain, node.opset, node.name)
    ctx = InferContext(node, input_types, consts)
    if op.infer is not None:
        return op.infer(ctx)
    try:
        return _meta_infer(op, ctx)
    except TensorsmithError:
        raise
    except Exception:
        t = input_types[0] if input_types else None
        return [TensorType(t.dtype if t else None, None)] * len(node.outputs)


def _try_const_eval(op: OpDef, node: Node, args: list) -> list[torch.Tensor] | None:
    if not op.deterministic or any(node.subgraphs()):
        return None
    try:
        res = op.reference(RunContext(node), *args)
    except Exception:
        return None  # the runtime will report it with its context
    return list(res) if isinstance(res, (tuple, list)) else [res]


def infer_graph(graph: Graph, known: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """Set the type of every node output; returns the constants it could evaluate."""
    known = dict(known or {})
    for name, t in graph.initializers.items():
        if t.numel() <= CONST_EVAL_LIMIT:
            known[name] = t
    for node in graph.nodes:
        types = [v.type if v is not None else None for v in node.inputs]
        consts = [known.get(v.name) if v is not None else None for v in node.inputs]
        for sub in node.subgraphs():
            infer_graph(sub, known)
        try:
            out_types = infer_node(node, types, consts)
        except TensorsmithError:
            raise
        except Exception as e:  # a bug in a rule must still name the node
            raise ShapeInferenceError(node.name, node.op_type, f"type inference failed: {type(e).__name__}: {e}") from e
        op = lookup(node.op_type, node.domain, node.opset, node.name)
        all_known = all(v is None or c is not None for v, c in zip(node.inputs, consts))
        small = all(_is_small(t) for t in out_types) and len(out_types) >= len(node.outputs)
        values = _try_const_eval(op, node, consts) if all_known and small else None
        for i, v in enumerate(node.outputs):
            t = out_types[i] if i < len(out_types) else None
            if values is not None and i < len(values) and isinstance(values[i], torch.Tensor):
                val = values[i]
                t = TensorType(DType.from_torch(val.dtype), tuple(val.shape))
                if val.numel() <= CONST_EVAL_LIMIT:
                    known[v.name] = val
            if t is not None:
                v.type = _merge(v.type, t)
    return known


def _is_small(t: TensorType | None) -> bool:
    """Only outputs known to be small are evaluated at build time (a bad shape must not allocate GBs)."""
    if t is None or t.shape is None or not t.is_static:
        return False
    n = 1
    for d in t.shape:
        n *= d
    return n <= CONST_EVAL_LIMIT


def _merge(declared: TensorType | None, inferred: TensorType) -> TensorType:
    """Prefer inferred facts; keep declared dims where inference knows less."""
    if declared is None:
        return inferred
    dtype = inferred.dtype or declared.dtype
    if inferred.shape is None:
        return TensorType(dtype, declared.shape)
    if declared.shape is None or len(declared.shape) != len(inferred.shape):
        return TensorType(dtype, inferred.shape)
    shape = tuple(
        d if isinstance(i, str) and i.startswith("unk") and d is not None else i
        for i, d in zip(inferred.shape, declared.shape)
    )
    return TensorType(dtype, shape)

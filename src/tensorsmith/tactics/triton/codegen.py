"""Triton source for elementwise math: one node -> one line of Triton code.

`emit_elementwise(nodes, env, scalar_of)` writes, for elementwise nodes in order, the lines
that compute their outputs from variables already in `env` (value name -> Triton variable).
Float math runs in float32 registers whatever the storage dtype: loads convert to float32,
stores convert back. Scalar weights are inlined as literals (`scalar_of(value)` gives them);
other weights and activations must be loaded by the caller and put in `env`.

Only functions that also run under TRITON_INTERPRET=1 are used (tl.math's exp, log, sqrt,
erf, floor, ...; libdevice is not interpreted), so every kernel is testable on a CPU.
"""

from __future__ import annotations

import math
from typing import Callable

from ...ir import DType, Node, Value

TL_DTYPE = {
    DType.FLOAT32: "tl.float32", DType.FLOAT16: "tl.float16", DType.BFLOAT16: "tl.bfloat16",
    DType.FLOAT64: "tl.float64", DType.INT8: "tl.int8", DType.INT16: "tl.int16", DType.INT32: "tl.int32",
    DType.INT64: "tl.int64", DType.UINT8: "tl.uint8", DType.BOOL: "tl.int1",
}


def register_dtype(dt: DType | None) -> str | None:
    """The Triton type a value of `dt` is held in while computing (floats widen to float32)."""
    if dt is None:
        return None
    if dt.is_float and dt != DType.FLOAT64:
        return "tl.float32"
    return TL_DTYPE.get(dt)


def _f(x: float) -> str:
    if math.isnan(x):
        return "float('nan')"
    if math.isinf(x):
        return "float('inf')" if x > 0 else "float('-inf')"
    return repr(float(x))


def _tanh(a: str) -> str:
    return f"(2.0 * tl.sigmoid(2.0 * {a}) - 1.0)"


def _softplus(a: str) -> str:
    return f"(tl.maximum({a}, 0.0) + tl.math.log(1.0 + tl.math.exp(-tl.abs({a}))))"


def _round_half_even(a: str) -> str:
    f = f"tl.math.floor({a})"
    odd = f"(({f} - 2.0 * tl.math.floor(0.5 * {f})) != 0.0)"
    return f"tl.where((({a} - {f}) > 0.5) | ((({a} - {f}) == 0.5) & {odd}), {f} + 1.0, {f})"


def _mod(n: Node, a: str, b: str) -> str:
    """ONNX Mod: fmod=1 is C's remainder (Triton's %); fmod=0 takes the divisor's sign."""
    if n.attrs.get("fmod", 0):
        return f"({a} % {b})"
    r = f"({a} % {b})"
    return f"tl.where(({r} != 0) & (({r} < 0) != ({b} < 0)), {r} + {b}, {r})"


# Each rule: (node, argument expressions) -> expression; None means "not supported here".
_UNARY: dict[str, Callable[[Node, str], str]] = {
    "Identity": lambda n, a: a,
    "Neg": lambda n, a: f"(-{a})",
    "Abs": lambda n, a: f"tl.abs({a})",
    "Relu": lambda n, a: f"tl.maximum({a}, 0.0)",
    "LeakyRelu": lambda n, a: f"tl.where({a} >= 0.0, {a}, {a} * {_f(n.attrs.get('alpha', 0.01))})",
    "Elu": lambda n, a: f"tl.where({a} > 0.0, {a}, {_f(n.attrs.get('alpha', 1.0))} * (tl.math.exp({a}) - 1.0))",
    "Selu": lambda n, a: (f"{_f(n.attrs.get('gamma', 1.0507009873554805))} * tl.where({a} > 0.0, {a}, "
                          f"{_f(n.attrs.get('alpha', 1.6732632423543772))} * (tl.math.exp({a}) - 1.0))"),
    "Celu": lambda n, a: (f"(tl.maximum({a}, 0.0) + tl.minimum(0.0, {_f(n.attrs.get('alpha', 1.0))} * "
                          f"(tl.math.exp({a} / {_f(n.attrs.get('alpha', 1.0))}) - 1.0)))"),
    "Sigmoid": lambda n, a: f"tl.sigmoid({a})",
    "HardSigmoid": lambda n, a: (f"tl.minimum(tl.maximum({_f(n.attrs.get('alpha', 0.2))} * {a} + "
                                 f"{_f(n.attrs.get('beta', 0.5))}, 0.0), 1.0)"),
    "HardSwish": lambda n, a: f"({a} * tl.minimum(tl.maximum({a} / 6.0 + 0.5, 0.0), 1.0))",
    "Tanh": lambda n, a: _tanh(a),
    "Exp": lambda n, a: f"tl.math.exp({a})",
    "Log": lambda n, a: f"tl.math.log({a})",
    "Sqrt": lambda n, a: f"tl.sqrt({a})",
    "Reciprocal": lambda n, a: f"(1.0 / {a})",
    "Erf": lambda n, a: f"tl.math.erf({a})",
    "Floor": lambda n, a: f"tl.math.floor({a})",
    "Ceil": lambda n, a: f"tl.math.ceil({a})",
    "Sin": lambda n, a: f"tl.math.sin({a})",
    "Cos": lambda n, a: f"tl.math.cos({a})",
    "Sign": lambda n, a: f"tl.where({a} > 0.0, 1.0, tl.where({a} < 0.0, -1.0, 0.0))",
    "Softplus": lambda n, a: _softplus(a),
    "Softsign": lambda n, a: f"({a} / (1.0 + tl.abs({a})))",
    "Mish": lambda n, a: f"({a} * {_tanh(_softplus(a))})",
    "Swish": lambda n, a: f"({a} * tl.sigmoid({_f(n.attrs.get('alpha', 1.0))} * {a}))",
    "ThresholdedRelu": lambda n, a: f"tl.where({a} > {_f(n.attrs.get('alpha', 1.0))}, {a}, 0.0)",
    "Gelu": lambda n, a: (
        f"(0.5 * {a} * (1.0 + {_tanh(f'0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a})')}))"
        if n.attrs.get("approximate", "none") == "tanh" else f"(0.5 * {a} * (1.0 + tl.math.erf({a} * 0.7071067811865476)))"
    ),
    "Shrink": lambda n, a: (f"tl.where({a} < -{_f(n.attrs.get('lambd', 0.5))}, {a} + {_f(n.attrs.get('bias', 0.0))}, "
                            f"tl.where({a} > {_f(n.attrs.get('lambd', 0.5))}, {a} - {_f(n.attrs.get('bias', 0.0))}, 0.0))"),
    "Round": lambda n, a: _round_half_even(a),
    "Tan": lambda n, a: f"(tl.math.sin({a}) / tl.math.cos({a}))",
    "Sinh": lambda n, a: f"(0.5 * (tl.math.exp({a}) - tl.math.exp(-{a})))",
    "Cosh": lambda n, a: f"(0.5 * (tl.math.exp({a}) + tl.math.exp(-{a})))",
    "Asinh": lambda n, a: f"tl.where({a} < 0.0, -1.0, 1.0) * tl.math.log(tl.abs({a}) + tl.sqrt({a} * {a} + 1.0))",
    "Acosh": lambda n, a: f"tl.math.log({a} + tl.sqrt({a} * {a} - 1.0))",
    "Atanh": lambda n, a: f"(0.5 * tl.math.log((1.0 + {a}) / (1.0 - {a})))",
    "IsNaN": lambda n, a: f"({a} != {a})",
    "Not": lambda n, a: f"({a} == 0)",
}

_BINARY: dict[str, Callable[[Node, str, str], str]] = {
    "Add": lambda n, a, b: f"({a} + {b})",
    "Sub": lambda n, a, b: f"({a} - {b})",
    "Mul": lambda n, a, b: f"({a} * {b})",
    "Div": lambda n, a, b: f"({a} / {b})",
    "Max": lambda n, a, b: f"tl.maximum({a}, {b})",
    "Min": lambda n, a, b: f"tl.minimum({a}, {b})",
    "PRelu": lambda n, a, b: f"tl.where({a} >= 0.0, {a}, {a} * {b})",
    "Equal": lambda n, a, b: f"({a} == {b})",
    "Less": lambda n, a, b: f"({a} < {b})",
    "LessOrEqual": lambda n, a, b: f"({a} <= {b})",
    "Greater": lambda n, a, b: f"({a} > {b})",
    "GreaterOrEqual": lambda n, a, b: f"({a} >= {b})",
    "And": lambda n, a, b: f"(({a} != 0) & ({b} != 0))",
    "Or": lambda n, a, b: f"(({a} != 0) | ({b} != 0))",
    "Xor": lambda n, a, b: f"(({a} != 0) ^ ({b} != 0))",
}


# Integer (and bool) nodes: exact integer semantics, no float literals. Division truncates
# toward zero as ONNX integer Div does (Triton's // on integers is C division).
_INT_UNARY: dict[str, Callable[[Node, str], str]] = {
    "Identity": lambda n, a: a,
    "Neg": lambda n, a: f"(-{a})",
    "Abs": lambda n, a: f"tl.abs({a})",
    "Relu": lambda n, a: f"tl.maximum({a}, 0)",
    "Sign": lambda n, a: f"tl.where({a} > 0, 1, tl.where({a} < 0, -1, 0)).to({register_dtype(n.outputs[0].type.dtype)})",
    "BitwiseNot": lambda n, a: f"(~{a})",
}

_INT_BINARY: dict[str, Callable[[Node, str, str], str]] = {
    **{k: _BINARY[k] for k in ("Add", "Sub", "Mul", "Max", "Min", "Equal", "Less", "LessOrEqual", "Greater",
                               "GreaterOrEqual")},
    "Div": lambda n, a, b: f"({a} // {b})",
    "Mod": _mod,
    "BitwiseAnd": lambda n, a, b: f"({a} & {b})",
    "BitwiseOr": lambda n, a, b: f"({a} | {b})",
    "BitwiseXor": lambda n, a, b: f"({a} ^ {b})",
}


def _int_expression(node: Node, args: list[str]) -> str | None:
    """Integer/bool nodes (inputs not all float); None for what needs float semantics."""
    op = node.op_type
    out = node.outputs[0].type.dtype if node.outputs[0].type else None
    if out is None or out.is_float or out not in TL_DTYPE:
        return None
    if op in _INT_UNARY and len(args) == 1:
        return _INT_UNARY[op](node, args[0])
    if op in _INT_BINARY and len(args) == 2:
        return _INT_BINARY[op](node, args[0], args[1])
    if op in ("Sum", "Max", "Min") and len(args) >= 2:
        if op == "Sum":
            return "(" + " + ".join(args) + ")"
        fn = "tl.maximum" if op == "Max" else "tl.minimum"
        expr = args[0]
        for a in args[1:]:
            expr = f"{fn}({expr}, {a})"
        return expr
    if op == "Clip":
        expr = args[0]
        if len(args) > 1 and args[1] != "None":
            expr = f"tl.maximum({expr}, {args[1]})"
        if len(args) > 2 and args[2] != "None":
            expr = f"tl.minimum({expr}, {args[2]})"
        return expr
    return None


def _pow(node: Node, args: list[str], scalars: list[float | None]) -> str | None:
    e = scalars[1]
    if e is None:
        return None
    a = args[0]
    if e == 2.0:
        return f"({a} * {a})"
    if e == 3.0:
        return f"({a} * {a} * {a})"
    if e == 1.0:
        return a
    if e == 0.5:
        return f"tl.sqrt({a})"
    if e == -1.0:
        return f"(1.0 / {a})"
    return f"tl.math.exp({_f(e)} * tl.math.log({a}))"  # real results for a > 0 only, as for float pow


def _float_node(node: Node) -> bool:
    """Float math only (integer semantics such as truncating Div are left to other tactics)."""
    ins = [v for v in node.inputs if v is not None and v.type is not None]
    if node.op_type in ("Where", "Not", "And", "Or", "Xor", "Cast"):
        return True
    return all(v.type.dtype is not None and v.type.dtype.is_float for v in ins)


def node_expression(node: Node, args: list[str], scalars: list[float | None]) -> str | None:
    """The Triton expression of one elementwise node, or None if this codegen cannot express it."""
    op = node.op_type
    if node.domain or len(node.outputs) != 1:
        return None
    if not _float_node(node):
        return _int_expression(node, args)
    if op in _UNARY and len(args) == 1:
        return _UNARY[op](node, args[0])
    if op in _BINARY and len(args) == 2:
        return _BINARY[op](node, args[0], args[1])
    if op in ("Sum", "Mean", "Max", "Min") and len(args) >= 2:
        if op in ("Sum", "Mean"):
            s = "(" + " + ".join(args) + ")"
            return s if op == "Sum" else f"({s} / {_f(len(args))})"
        fn = "tl.maximum" if op == "Max" else "tl.minimum"
        expr = args[0]
        for a in args[1:]:
            expr = f"{fn}({expr}, {a})"
        return expr
    if op == "Pow" and len(args) == 2:
        return _pow(node, args, scalars)
    if op == "Mod" and len(args) == 2:
        return _mod(node, args[0], args[1])
    if op == "Clip":
        expr = args[0]
        if len(args) > 1 and args[1] != "None":
            expr = f"tl.maximum({expr}, {args[1]})"
        if len(args) > 2 and args[2] != "None":
            expr = f"tl.minimum({expr}, {args[2]})"
        return expr
    if op == "Where" and len(args) == 3:
        return f"tl.where({args[0]} != 0, {args[1]}, {args[2]})"
    if op == "Cast":
        to = register_dtype(node.outputs[0].type.dtype if node.outputs[0].type else None)
        if to is None:
            return None
        # Round through the storage type so that a cast to float16 loses what it loses in memory.
        storage = TL_DTYPE.get(node.outputs[0].type.dtype)
        return f"{args[0]}.to({storage}).to({to})" if storage != to else f"{args[0]}.to({to})"
    if op == "IsInf":
        pos, neg = node.attrs.get("detect_positive", 1), node.attrs.get("detect_negative", 1)
        parts = ([f"({args[0]} == float('inf'))"] if pos else []) + ([f"({args[0]} == float('-inf'))"] if neg else [])
        return " | ".join(parts) if parts else f"({args[0]} != {args[0]}) & False"
    return None


def can_emit(node: Node, scalars: list[float | None] | None = None) -> bool:
    args = [f"a{i}" if v is not None else "None" for i, v in enumerate(node.inputs)]
    return node_expression(node, args, scalars or [None] * len(args)) is not None


def emit_elementwise(
    nodes: list[Node],
    env: dict[str, str],
    scalar_of: Callable[[Value], float | None] = lambda v: None,
    prefix: str = "v",
) -> list[str]:
    """Code lines computing `nodes` (in order); each output gets a variable added to `env`.

    Raises ValueError for a node this codegen cannot express (the tactic then does not apply).
    """
    lines = []
    for i, node in enumerate(nodes):
        args, scalars = [], []
        for v in node.inputs:
            if v is None:
                args.append("None")
                scalars.append(None)
                continue
            s = scalar_of(v)
            scalars.append(s)
            if v.name in env:
                args.append(env[v.name])
            elif s is not None:
                dt = v.type.dtype if v.type is not None else None
                args.append(_f(s) if dt is None or dt.is_float else str(int(s)))  # integer ops stay integer
            else:
                raise ValueError(f"value '{v.name}' read by node '{node.name}' was not loaded")
        expr = node_expression(node, args, scalars)
        if expr is None:
            raise ValueError(f"node '{node.name}' ({node.op_type}) has no Triton expression")
        var = f"{prefix}{i}"
        lines.append(f"{var} = {expr}")
        env[node.outputs[0].name] = var
    return lines

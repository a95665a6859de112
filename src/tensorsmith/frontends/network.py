"""Building a network by hand, in the spirit of TensorRT's INetworkDefinition.

    net = tensorsmith.Network()
    x = net.add_input("x", "float32", (1, 3, 8, 8))
    y = net.add_convolution(x, w, b, stride=1, padding=1)
    y = net.add_activation(y, "relu")
    net.mark_output(y, "out")
    engine = tensorsmith.build(net)

Each `add_*` appends standard ONNX-semantics nodes to an IR Graph and types their outputs
at once with the op registry's inference, so a wrong shape fails at the call that made it
(a ShapeInferenceError naming the node). The tensors passed around are the graph's Values
(`.name`, `.type`, `.shape`). Weights (numpy arrays or torch tensors) are copied in.
`to_graph()` replays the recorded calls into a fresh Graph, so one network builds any number
of engines (the builder optimizes the graph it gets in place).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import torch

from ..errors import ShapeInferenceError, TensorsmithError
from ..ir import DType, Graph, Node, TensorType, Value
from ..ops.inference import CONST_EVAL_LIMIT, infer_node

DEFAULT_OPSET = 20  # Gelu (20) and the opset-18 reduction forms are available

_ACTIVATIONS = {
    "relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "leaky_relu": "LeakyRelu", "elu": "Elu",
    "selu": "Selu", "softplus": "Softplus", "softsign": "Softsign", "hard_sigmoid": "HardSigmoid",
    "hard_swish": "HardSwish", "gelu": "Gelu", "mish": "Mish", "clip": "Clip", "silu": None,
}
_ELEMENTWISE = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "max": "Max", "min": "Min", "pow": "Pow"}
_POOLING = {"max": "MaxPool", "average": "AveragePool", "avg": "AveragePool"}


class Network:
    """A network under construction. Every `add_*` returns the output tensor (an IR Value)."""

    def __init__(self, name: str = "network", opset: int = DEFAULT_OPSET):
        self.name = name
        self.opset = opset
        self._graph = self._new_graph()
        self._steps: list[tuple[str, tuple]] = []  # ("input" | "weight" | "node" | "output", args)

    # -- inputs, weights, outputs --------------------------------------------------------
    def add_input(self, name: str, dtype: str | DType, shape: Sequence[int | str]) -> Value:
        """A network input. Dims are ints or names (symbolic, e.g. "batch"; give the builder profiles)."""
        dt = dtype if isinstance(dtype, DType) else DType(str(dtype))
        if self._graph.lookup(name) is not None:
            raise TensorsmithError(f"network already has a tensor named '{name}'; pick another name")
        return self._do("input", (name, TensorType(dt, tuple(shape))))

    def add_constant(self, value: Any, name: str | None = None) -> Value:
        """A weight (copied). Weights are refittable by this name."""
        return self._do("weight", (name or self._graph.fresh_name("weight"), _tensor(value)))

    def mark_output(self, tensor: Value, name: str | None = None) -> Value:
        """Make `tensor` a network output (under `name` if given: an Identity renames it)."""
        self._check(tensor)
        if name is not None and name != tensor.name:
            tensor = self._node("Identity", [tensor], name=f"{name}_output", outputs=[name])
        return self._do("output", (tensor.name,))

    # -- layers ---------------------------------------------------------------------------
    def add_convolution(self, x: Value, weights: Any, bias: Any = None, stride: int | Sequence[int] = 1,
                        padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, groups: int = 1,
                        name: str | None = None) -> Value:
        """Conv (N, C, *spatial) with `weights` (K, C/groups, *kernel) and optional `bias` (K,).
        `padding` is per spatial dim, symmetric (or a full ONNX pads list of 2 * spatial ints)."""
        w = self._weight(weights, name, "weight")
        k = w.shape[2:] if w.shape is not None else ()
        n = len(k)
        ins = [x, w] + ([self._weight(bias, name, "bias")] if bias is not None else [])
        pads = _ints(padding, n)
        pads = pads + pads if len(pads) == n else pads
        attrs = {"strides": _ints(stride, n), "pads": pads, "dilations": _ints(dilation, n), "group": int(groups),
                 "kernel_shape": [int(d) for d in k]}
        return self._node("Conv", ins, attrs, name)

    def add_activation(self, x: Value, kind: str, alpha: float | None = None, beta: float | None = None,
                       name: str | None = None) -> Value:
        """Activation by kind: relu, sigmoid, tanh, leaky_relu (alpha), elu (alpha), selu, softplus,
        softsign, hard_sigmoid (alpha, beta), hard_swish, gelu, mish, silu, clip (alpha=min, beta=max)."""
        if kind not in _ACTIVATIONS:
            raise TensorsmithError(f"unknown activation '{kind}'; choose one of {sorted(_ACTIVATIONS)}")
        if kind == "silu":
            return self._node("Mul", [x, self._node("Sigmoid", [x], name=name and f"{name}_sigmoid")], name=name)
        if kind == "clip":
            lo = self.add_constant(np.array(-np.inf if alpha is None else alpha, np.float32))
            hi = self.add_constant(np.array(np.inf if beta is None else beta, np.float32))
            return self._node("Clip", [x, lo, hi], name=name)
        attrs = {k: float(v) for k, v in (("alpha", alpha), ("beta", beta)) if v is not None}
        return self._node(_ACTIVATIONS[kind], [x], attrs, name)

    def add_scale(self, x: Value, scale: Any = None, shift: Any = None, power: Any = None, mode: str = "channel",
                  channel_axis: int = 1, name: str | None = None) -> Value:
        """TensorRT's IScaleLayer: (x * scale + shift) ** power, with `mode` "uniform" (scalars),
        "channel" (vectors along `channel_axis`) or "elementwise" (arrays shaped like x)."""
        if mode not in ("uniform", "channel", "elementwise"):
            raise TensorsmithError(f"unknown scale mode '{mode}'; choose 'uniform', 'channel' or 'elementwise'")
        rank = len(x.shape) if x.shape is not None else None
        out = x
        for op, value, what in (("Mul", scale, "scale"), ("Add", shift, "shift"), ("Pow", power, "power")):
            if value is None:
                continue
            t = _tensor(value)
            if mode == "channel":
                if rank is None:
                    raise TensorsmithError(f"add_scale(mode='channel') needs x of known rank, x is {x.type}")
                axis = channel_axis % rank
                t = t.reshape([-1] + [1] * (rank - axis - 1))
            elif mode == "uniform":
                t = t.reshape(())
            w = self.add_constant(t, self._graph.fresh_name(f"{name or 'scale'}_{what}"))
            out = self._node(op, [out, w], name=name and f"{name}_{what}")
        return out

    def add_matmul(self, a: Value, b: Any, transpose_a: bool = False, transpose_b: bool = False,
                   name: str | None = None) -> Value:
        """Matrix product (numpy broadcasting); `b` may be a weight array."""
        b = b if isinstance(b, Value) else self._weight(b, name, "weight")
        if transpose_a:
            a = self._transpose_last(a)
        if transpose_b:
            b = self._transpose_last(b)
        return self._node("MatMul", [a, b], name=name)

    def add_elementwise(self, a: Value, b: Any, op: str, name: str | None = None) -> Value:
        """a <op> b with broadcasting; op is add, sub, mul, div, max, min or pow; `b` may be an array."""
        if op not in _ELEMENTWISE:
            raise TensorsmithError(f"unknown elementwise op '{op}'; choose one of {sorted(_ELEMENTWISE)}")
        b = b if isinstance(b, Value) else self.add_constant(b)
        return self._node(_ELEMENTWISE[op], [a, b], name=name)

    def add_pooling(self, x: Value, kind: str, window: int | Sequence[int], stride: int | Sequence[int] | None = None,
                    padding: int | Sequence[int] = 0, name: str | None = None) -> Value:
        """Max or average pooling over the spatial dims (average excludes padding, as TensorRT's default)."""
        if kind not in _POOLING:
            raise TensorsmithError(f"unknown pooling '{kind}'; choose 'max' or 'average'")
        n = len(x.shape) - 2 if x.shape is not None else len(_ints(window, 1))
        k = _ints(window, n)
        pads = _ints(padding, n)
        attrs = {"kernel_shape": k, "strides": _ints(stride if stride is not None else window, n),
                 "pads": pads + pads if len(pads) == n else pads}
        return self._node(_POOLING[kind], [x], attrs, name)

    def add_softmax(self, x: Value, axis: int = -1, name: str | None = None) -> Value:
        return self._node("Softmax", [x], {"axis": int(axis)}, name)

    def add_reshape(self, x: Value, shape: Sequence[int], name: str | None = None) -> Value:
        """Reshape with ONNX rules (0 keeps a dim, -1 is inferred)."""
        s = self.add_constant(np.asarray(shape, np.int64))
        return self._node("Reshape", [x, s], name=name)

    def add_transpose(self, x: Value, perm: Sequence[int], name: str | None = None) -> Value:
        return self._node("Transpose", [x], {"perm": [int(p) for p in perm]}, name)

    def add_op(self, op_type: str, inputs: Iterable[Value | None], attrs: dict | None = None, num_outputs: int = 1,
               name: str | None = None, domain: str = "") -> Value | list[Value]:
        """Any registered op by its ONNX name (the escape hatch for layers without an add_* method)."""
        outs = self._node(op_type, list(inputs), attrs, name, num_outputs=num_outputs, domain=domain)
        return outs

    # -- the graph ------------------------------------------------------------------------
    @property
    def inputs(self) -> list[Value]:
        return list(self._graph.inputs)

    @property
    def outputs(self) -> list[Value]:
        return list(self._graph.outputs)

    def to_graph(self) -> Graph:
        """A fresh IR Graph of the network (what `tensorsmith.build(net)` optimizes)."""
        if not self._graph.outputs:
            raise TensorsmithError("the network has no outputs; call net.mark_output(tensor) first")
        g = self._new_graph()
        for kind, args in self._steps:
            _apply(g, kind, args)
        return g

    def __str__(self) -> str:
        return str(self._graph)

    # -- internals ------------------------------------------------------------------------
    def _new_graph(self) -> Graph:
        g = Graph(self.name)
        g.opset_imports = {"": self.opset}
        return g

    def _do(self, kind: str, args: tuple):
        result = _apply(self._graph, kind, args)
        self._steps.append((kind, args))
        return result

    def _check(self, v: Value) -> None:
        if not isinstance(v, Value) or self._graph.lookup(v.name) is not v:
            raise TensorsmithError(f"{v!r} is not a tensor of this network; pass what its add_* methods returned")

    def _weight(self, value: Any, layer: str | None, what: str) -> Value:
        if isinstance(value, Value):
            self._check(value)
            return value
        return self.add_constant(value, self._graph.fresh_name(f"{layer or 'layer'}_{what}"))

    def _transpose_last(self, v: Value) -> Value:
        rank = len(v.shape)
        return self.add_transpose(v, list(range(rank - 2)) + [rank - 1, rank - 2])

    def _node(self, op_type: str, inputs: list, attrs: dict | None = None, name: str | None = None,
              outputs: list[str] | None = None, num_outputs: int = 1, domain: str = ""):
        for v in inputs:
            if v is not None:
                self._check(v)
        name = self._graph.fresh_name(name or op_type.lower())
        outs = outputs or [self._graph.fresh_name(f"{name}_out{i}" if num_outputs > 1 else f"{name}_out")
                           for i in range(num_outputs)]
        res = self._do("node", (op_type, [v.name if v is not None else None for v in inputs], dict(attrs or {}),
                                name, outs, domain))
        return res[0] if num_outputs == 1 else res


def _apply(g: Graph, kind: str, args: tuple):
    if kind == "input":
        return g.add_input(*args)
    if kind == "weight":
        return g.add_initializer(*args)
    if kind == "output":
        v = g.lookup(args[0])
        g.outputs.append(v)
        return v
    op_type, in_names, attrs, name, out_names, domain = args
    inputs = [g.lookup(n) if n is not None else None for n in in_names]
    node = Node(op_type, inputs, [Value(n) for n in out_names], dict(attrs), name=name, domain=domain,
                opset=g.opset_imports.get(domain, 1))
    g.append(node)
    types = [v.type if v is not None else None for v in inputs]
    consts = [g.initializers.get(v.name) if v is not None and v.name in g.initializers
              and g.initializers[v.name].numel() <= CONST_EVAL_LIMIT else None for v in inputs]
    try:
        inferred = infer_node(node, types, consts)
    except TensorsmithError:
        g.remove_node(node)  # a failed add leaves the network as it was
        raise
    except Exception as e:
        g.remove_node(node)
        raise ShapeInferenceError(name, op_type, f"{type(e).__name__}: {e}") from e
    for v, t in zip(node.outputs, inferred):
        v.type = t
    return node.outputs


def _tensor(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().clone().contiguous()
    arr = np.array(value, copy=True)
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)  # Python floats mean float32 weights, as in TensorRT
    from .onnx_import import numpy_to_torch

    return numpy_to_torch(arr, DType.from_numpy(arr.dtype))


def _ints(v: int | Sequence[int], n: int) -> list[int]:
    if isinstance(v, (int, np.integer)):
        return [int(v)] * n
    return [int(x) for x in v]

"""Grouping nodes into Layers: an anchor with the elementwise ops fused before and after it,
elementwise chains on their own, and every other node as a Layer of one.

Rules (what a fused kernel can do in one pass over memory):
- an epilogue is a chain of elementwise nodes from the anchor's output, each the only reader
  of the previous value, with the anchor's output shape (no broadcast growth); other inputs
  of those nodes (a residual, a bias) are read from outside;
- a prologue is an elementwise node whose only reader is the anchor (normalization,
  reduction, matmul and attention anchors; a cuDNN convolution cannot take one);
- elementwise chains merge where a value has exactly one reader, so each such Layer has one
  exit and the layer graph stays acyclic.
"""

from __future__ import annotations

from ..ir import Graph, Layer, Node, Value
from .manager import register_pass
from .rewrite import source_names

ELEMENTWISE = frozenset("""
Abs Acos Acosh Asin Asinh Atan Atanh Ceil Cos Cosh Erf Exp Floor Log Neg Reciprocal Round Sign Sin
Sinh Sqrt Tan Tanh Sigmoid Relu LeakyRelu Elu Selu Celu HardSigmoid HardSwish Softplus Softsign
ThresholdedRelu Mish Swish Gelu Shrink Not IsNaN IsInf Cast BitwiseNot Identity
Add Sub Mul Div Pow Mod PRelu Max Min Sum Mean And Or Xor Equal Greater GreaterOrEqual Less
LessOrEqual BitwiseAnd BitwiseOr BitwiseXor BitShift Where Clip
""".split())

ANCHOR_KINDS = {
    **dict.fromkeys(("Conv", "ConvTranspose"), "convolution"),
    **dict.fromkeys(("MatMul", "Gemm", "Einsum", "MatMulInteger", "QLinearMatMul"), "matmul"),
    "Attention": "attention",
    **dict.fromkeys(("BatchNormalization", "LayerNormalization", "RMSNormalization", "GroupNormalization",
                     "InstanceNormalization", "Softmax", "LogSoftmax", "LpNormalization",
                     "MeanVarianceNormalization"), "normalization"),
    **dict.fromkeys(("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                     "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "GlobalAveragePool",
                     "GlobalMaxPool", "GlobalLpPool", "ArgMax", "ArgMin"), "reduction"),
    **dict.fromkeys(("MaxPool", "AveragePool", "LpPool"), "pooling"),
}
_PROLOGUE_KINDS = {"normalization", "reduction", "matmul", "attention"}

SHUFFLE = frozenset("""
Reshape Transpose Flatten Squeeze Unsqueeze Concat Slice Split Gather GatherElements GatherND Expand
Tile Pad DepthToSpace SpaceToDepth Shape Size
""".split())


def node_kind(node: Node) -> str:
    if node.domain:
        return "other"
    if node.op_type in ANCHOR_KINDS:
        return ANCHOR_KINDS[node.op_type]
    if node.op_type in ELEMENTWISE:
        return "elementwise"
    if node.op_type in SHUFFLE:
        return "shuffle"
    if node.op_type in ("Constant", "ConstantOfShape"):
        return "constant"
    return "other"


def _only_reader(graph: Graph, v: Value) -> Node | None:
    if len(v.users) != 1 or any(o is v for o in graph.outputs):
        return None
    return v.users[0][0]


def _same_shape(a: Value, b: Value) -> bool:
    return a.type is not None and b.type is not None and a.type.shape is not None and a.type.shape == b.type.shape


def _layer_name(nodes: list[Node]) -> str:
    names = source_names(nodes)
    if len(names) > 6:
        return " + ".join(names[:5]) + f" + ({len(names) - 5} more)"
    return " + ".join(names)


def _feeds_a_norm_only(graph: Graph, node: Node) -> bool:
    """An Add of two activations whose only reader is a normalization: the residual of a post-norm
    block (BERT's LayerNorm(x + sublayer(x))). As the norm's prologue it costs one more load in the
    norm's pass; as a matmul's epilogue it costs cuBLAS a whole extra pass over the output."""
    reader = _only_reader(graph, node.outputs[0])
    return (node.op_type == "Add" and reader is not None and node_kind(reader) == "normalization"
            and reader.inputs[0] is node.outputs[0] and not any(v.name in graph.initializers for v in node.inputs))


def _has_bias(node: Node) -> bool:
    return len(node.inputs) > 2 and node.inputs[2] is not None


def _a_biased_conv_takes_it(graph: Graph, anchor: Node, add: Node, owner: dict[int, Layer]) -> bool:
    """A residual Add of two Convs goes to the one with the bias (residual_bias_merging left the
    other without), whatever the node order: cuDNN adds the bias free inside a fused epilogue."""
    if add.op_type != "Add" or anchor.op_type != "Conv" or _has_bias(anchor):
        return False
    other = next((v.producer for v in add.inputs if v is not None and v is not anchor.outputs[0]), None)
    return (other is not None and other.op_type == "Conv" and other.graph is graph and id(other) not in owner
            and _has_bias(other) and _only_reader(graph, other.outputs[0]) is add)


def _grow_epilogue(graph: Graph, anchor: Node, owner: dict[int, Layer], layer: Layer) -> None:
    out = anchor.outputs[0]
    while True:
        user = _only_reader(graph, out)
        if user is None or id(user) in owner or node_kind(user) != "elementwise" or user.graph is not graph:
            return
        if out is anchor.outputs[0] and _a_biased_conv_takes_it(graph, anchor, user, owner):
            return
        if layer.kind == "matmul" and _feeds_a_norm_only(graph, user):
            return
        if len(user.outputs) != 1 or not _same_shape(user.outputs[0], anchor.outputs[0]):
            return
        layer.nodes.append(user)
        owner[id(user)] = layer
        out = user.outputs[0]


def _grow_prologue(graph: Graph, anchor: Node, owner: dict[int, Layer], layer: Layer) -> None:
    for v in anchor.inputs:
        p = v.producer if v is not None else None
        if p is None or p.graph is not graph or id(p) in owner or node_kind(p) != "elementwise":
            continue
        if _only_reader(graph, v) is anchor and len(p.outputs) == 1:
            layer.nodes.insert(0, p)
            owner[id(p)] = layer


def _group_elementwise(graph: Graph, owner: dict[int, Layer], layers: list[Layer]) -> None:
    """Merge each unowned elementwise node into the Layer of its only reader, walking backwards."""
    for node in reversed(graph.nodes):
        if id(node) in owner or node_kind(node) != "elementwise" or len(node.outputs) != 1:
            continue
        reader = _only_reader(graph, node.outputs[0])
        target = owner.get(id(reader)) if reader is not None else None
        if target is not None and target.kind == "elementwise":
            target.nodes.insert(0, node)
            owner[id(node)] = target
        else:
            layer = Layer("", "elementwise", [node])
            owner[id(node)] = layer
            layers.append(layer)


def group_layers(graph: Graph, fuse: bool = True) -> None:
    """Set `graph.layers` and reorder `graph.nodes` layer by layer (a topological order)."""
    owner: dict[int, Layer] = {}
    layers: list[Layer] = []
    if fuse:
        for node in graph.nodes:
            kind = node_kind(node)
            if kind not in _PROLOGUE_KINDS and kind not in ("convolution", "pooling") or id(node) in owner:
                continue
            layer = Layer("", kind, [node], anchor=node)
            owner[id(node)] = layer
            layers.append(layer)
            if kind in _PROLOGUE_KINDS:
                _grow_prologue(graph, node, owner, layer)
            if len(node.outputs) == 1 or all(not o.users for o in node.outputs[1:]):
                _grow_epilogue(graph, node, owner, layer)
        _group_elementwise(graph, owner, layers)
    for node in graph.nodes:
        if id(node) not in owner:
            layer = Layer("", node_kind(node), [node], anchor=node if node_kind(node) in ANCHOR_KINDS.values() else None)
            owner[id(node)] = layer
            layers.append(layer)
    ordered = _topological_layers(graph, layers, owner)
    pos = _position(graph)
    for layer in ordered:
        layer.nodes.sort(key=lambda n: pos[id(n)])
        layer.name = _layer_name(layer.nodes)
    graph.nodes = [n for layer in ordered for n in layer.nodes]
    graph.layers = ordered


def _position(graph: Graph) -> dict[int, int]:
    return {id(n): i for i, n in enumerate(graph.nodes)}


def _topological_layers(graph: Graph, layers: list[Layer], owner: dict[int, Layer]) -> list[Layer]:
    """Order layers so each comes after the layers it reads from (stable in node order)."""
    pos = _position(graph)
    deps: dict[int, set[int]] = {id(l): set() for l in layers}
    for l in layers:
        for n in l.nodes:
            for v in n.inputs:
                p = v.producer if v is not None else None
                if p is not None and id(p) in owner and owner[id(p)] is not l:
                    deps[id(l)].add(id(owner[id(p)]))
    by_id = {id(l): l for l in layers}
    done: set[int] = set()
    ordered: list[Layer] = []
    pending = sorted(layers, key=lambda l: min(pos[id(n)] for n in l.nodes))
    while pending:
        for i, l in enumerate(pending):
            if deps[id(l)] <= done:
                ordered.append(l)
                done.add(id(l))
                del pending[i]
                break
        else:
            raise RuntimeError("layer grouping made a cycle: " + ", ".join(by_id[d].name for d in deps[id(pending[0])]))
    return ordered


@register_pass("layer_fusion", 3, "group nodes into Layers: anchors with their prologue/epilogue, elementwise chains",
               fixed_point=False, final=True)
def layer_fusion(graph: Graph) -> bool:
    group_layers(graph, fuse=True)
    return any(len(l.nodes) > 1 for l in graph.layers)

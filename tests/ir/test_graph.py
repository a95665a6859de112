import pytest
import torch

from tensorsmith.errors import InvalidGraphError
from tensorsmith.ir import DType, Graph, Node, TensorType, Value, broadcast_shapes, verify


def small_graph() -> Graph:
    g = Graph("g")
    x = g.add_input("x", TensorType(DType.FLOAT32, ("N", 4)))
    w = g.add_initializer("w", torch.ones(4, 2))
    mm = g.add_node("MatMul", [x, w], name="mm")
    relu = g.add_node("Relu", [mm.outputs[0]], name="relu")
    g.outputs.append(relu.outputs[0])
    return g


def test_values_know_producer_and_users():
    g = small_graph()
    mm, relu = g.nodes
    x = g.values["x"]
    assert x.users == [(mm, 0)]
    assert mm.outputs[0].producer is mm
    assert mm.outputs[0].users == [(relu, 0)]
    assert g.is_initializer(g.values["w"])
    assert not g.is_initializer(x)


def test_set_input_moves_use():
    g = small_graph()
    mm, relu = g.nodes
    x = g.values["x"]
    relu.set_input(0, x)
    assert (relu, 0) in x.users
    assert mm.outputs[0].users == []


def test_remove_node_unlinks_its_inputs():
    g = small_graph()
    mm, relu = g.nodes
    g.outputs = [mm.outputs[0]]
    g.remove_node(relu)
    assert mm.outputs[0].users == []
    verify(g)


def test_verifier_accepts_valid_graph():
    verify(small_graph())


def test_verifier_rejects_undefined_input():
    g = small_graph()
    ghost = Value("ghost")
    g.append(Node("Relu", [ghost], [Value("r")], name="bad"))
    with pytest.raises(InvalidGraphError, match="bad.*ghost.*not defined"):
        verify(g)


def test_verifier_rejects_out_of_order_nodes():
    g = small_graph()
    g.nodes.reverse()
    with pytest.raises(InvalidGraphError, match="topological"):
        verify(g)


def test_verifier_rejects_double_assignment():
    g = small_graph()
    x = g.values["x"]
    dup = Value("x")
    g.append(Node("Relu", [x], [dup], name="dup"))
    with pytest.raises(InvalidGraphError, match="assigned twice"):
        verify(g)


def test_verifier_rejects_missing_output():
    g = small_graph()
    g.outputs.append(Value("nowhere"))
    with pytest.raises(InvalidGraphError, match="nowhere"):
        verify(g)


def test_verifier_calls_node_check():
    seen = []
    verify(small_graph(), check_node=lambda n: seen.append(n.name))
    assert seen == ["mm", "relu"]


def test_printer_shows_ops_types_and_names():
    g = small_graph()
    g.nodes[0].outputs[0].type = TensorType(DType.FLOAT32, ("N", 2))
    text = str(g)
    assert "input %x: float32[N,4]" in text
    assert "init  %w: float32[4,2]" in text
    assert "= MatMul(%x, %w)  # mm" in text
    assert "return %" in text


def test_broadcast_shapes_with_symbols():
    assert broadcast_shapes(("N", 1, 4), (3, 1)) == ("N", 3, 4)
    assert broadcast_shapes((2, 3), ()) == (2, 3)
    assert broadcast_shapes(("N", 3), None) is None
    with pytest.raises(ValueError):
        broadcast_shapes((2, 3), (4, 3))


def test_dtype_round_trips():
    for dt in DType:
        assert DType.from_torch(dt.torch) is dt
        assert DType.from_onnx(dt.onnx) is dt

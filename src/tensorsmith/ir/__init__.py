"""The tensorsmith IR: Graph, Node, Value, dtypes and shapes."""

from .dtypes import DType
from .graph import Graph, Node, Value
from .printer import format_graph
from .shapes import Dim, Shape, TensorType, broadcast_shapes
from .verifier import verify

__all__ = ["DType", "Graph", "Node", "Value", "Dim", "Shape", "TensorType", "broadcast_shapes", "format_graph", "verify"]

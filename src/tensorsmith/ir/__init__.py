"""The tensorsmith IR: Graph, Node, Value, dtypes and shapes."""

from .dtypes import DType
from .graph import Graph, Node, Value
from .layer import LAYER_KINDS, Layer
from .printer import format_graph
from .shapes import Dim, Shape, TensorType, broadcast_shapes
from .verifier import verify

__all__ = ["LAYER_KINDS", "Layer", "DType", "Graph", "Node", "Value", "Dim", "Shape", "TensorType", "broadcast_shapes", "format_graph", "verify"]

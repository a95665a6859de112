"""Where each weight lives when an engine runs on a device."""

from __future__ import annotations

import torch

from ..ir import Graph
from ..ops.registry import is_host_input


def stays_on_host(graph: Graph, name: str) -> bool:
    """True for weights that only shape/axes inputs read (see ops.registry.HOST_INPUTS): reading
    them on the CPU needs no device sync, which CUDA graph capture forbids."""
    users = graph.values[name].users
    return bool(users) and all(is_host_input(n.op_type, i) for n, i in users)


def place_weight(graph: Graph, name: str, t: torch.Tensor, device: torch.device) -> torch.Tensor:
    return t.cpu() if stays_on_host(graph, name) else t.to(device)


def place_weights(graph: Graph, device: torch.device) -> dict[str, torch.Tensor]:
    """The graph's weights on `device`, except those only read on the host."""
    return {name: place_weight(graph, name, t, device) for name, t in graph.initializers.items()}

"""Runs a graph node by node with the registry's references: the semantics every target must match."""

from __future__ import annotations

from collections import ChainMap

import torch

from ..errors import ExecutionError, TensorsmithError
from ..ir import Graph
from .registry import RunContext, lookup


def _last_uses(graph: Graph) -> dict[int, list[str]]:
    """For each node index, the value names that are dead after it (to free memory early)."""
    keep = {v.name for v in graph.outputs}
    last: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v is not None:
                last[v.name] = i
        for sub in node.subgraphs():
            for name in _free_names(sub):
                last[name] = i
    dead: dict[int, list[str]] = {}
    for name, i in last.items():
        if name not in keep:
            dead.setdefault(i, []).append(name)
    return dead


def _free_names(graph: Graph) -> set[str]:
    """Names a subgraph reads from its enclosing scopes."""
    local = {v.name for v in graph.inputs} | set(graph.initializers)
    free = set()
    for node in graph.nodes:
        for v in node.inputs:
            if v is not None and v.name not in local:
                free.add(v.name)
        for sub in node.subgraphs():
            free |= {n for n in _free_names(sub) if n not in local}
        local |= {v.name for v in node.outputs}
    free |= {v.name for v in graph.outputs if v.name not in local}
    return free


def run_graph(graph: Graph, feeds: dict[str, torch.Tensor], outer=None, device=None) -> list[torch.Tensor]:
    """Execute `graph` on `feeds` (by input name). `outer` is the enclosing scope for subgraphs."""
    env = ChainMap({}, outer) if outer is not None else ChainMap({})
    for name, t in graph.initializers.items():
        env[name] = t if device is None else t.to(device)
    env.update(feeds)
    dead = _last_uses(graph) if outer is None else {}

    def run_subgraph(sub: Graph, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        sub_feeds = {v.name: t for v, t in zip(sub.inputs, inputs)}
        return run_graph(sub, sub_feeds, outer=env, device=device)

    for i, node in enumerate(graph.nodes):
        op = lookup(node.op_type, node.domain, node.opset, node.name)
        args = []
        for v in node.inputs:
            if v is None:
                args.append(None)
            elif v.name in env:
                args.append(env[v.name])
            else:
                raise ExecutionError(node.name, node.op_type, f"input '{v.name}' has no value")
        try:
            res = op.reference(RunContext(node, run_subgraph), *args)
        except TensorsmithError:
            raise
        except Exception as e:
            raise ExecutionError(node.name, node.op_type, f"{type(e).__name__}: {e}") from e
        res = res if isinstance(res, (tuple, list)) else (res,)
        if device is not None and not node.inputs:
            # Ops without inputs (Constant, RandomNormal, windows) have no device to follow.
            res = tuple(r.to(device) if isinstance(r, torch.Tensor) else r for r in res)
        if len(res) < len(node.outputs):
            raise ExecutionError(node.name, node.op_type, f"produced {len(res)} outputs, the node has {len(node.outputs)}")
        for v, t in zip(node.outputs, res):
            env[v.name] = t
        for name in dead.get(i, ()):
            env.maps[0].pop(name, None)
    return [env[v.name] for v in graph.outputs]

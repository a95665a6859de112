"""Runtime: loads engine files (TensorRT's IRuntime). Loading runs no code from the file."""

from __future__ import annotations

import os

from ..engine.serialize import load_engine
from ..errors import EngineFormatError
from .engine import Engine


class Runtime:
    """`Runtime().load("model.tsmith") -> Engine`, or `deserialize(bytes)`.

    A GPU engine loads only on a GPU of the architecture it was built for (EngineTargetError
    otherwise); its runners are compiled from the installed tactics at load, with Triton's
    kernel cache on disk making repeated loads fast."""

    def load(self, path: str | os.PathLike) -> Engine:
        where = os.fspath(path)
        try:
            with open(where, "rb") as f:
                blob = f.read()
        except FileNotFoundError:
            raise EngineFormatError(where, "no such file", "check the path") from None
        except IsADirectoryError:
            raise EngineFormatError(where, "is a directory", "pass the .tsmith file") from None
        return self.deserialize(blob, where)

    def deserialize(self, blob: bytes, where: str = "<bytes>") -> Engine:
        data = load_engine(blob, where)
        engine = Engine(data.plan, cuda_graphs=True, profiles=data.profiles,
                        profile_layers=data.profile_layers or None, refittable=data.refittable)
        engine.source = where
        if data.plan.layers:
            _compile_at_load(engine, where)
        return engine


def _compile_at_load(engine: Engine, where: str) -> None:
    """Compile the runners of the tuned shapes now, so a missing tactic fails at load, not at run."""
    from .specialize import static_shapes

    shapes = static_shapes(engine.plan.graph)
    if shapes is not None:
        engine.executor_for(None, shapes)
        return
    for i, p in enumerate(engine.profiles):
        engine.executor_for(i, p.opt_shapes(engine.plan.inputs))


def load(path: str | os.PathLike) -> Engine:
    """Load an engine file: `tensorsmith.load("model.tsmith")`."""
    return Runtime().load(path)

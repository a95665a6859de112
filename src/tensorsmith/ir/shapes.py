"""Tensor types: a dtype and a shape whose dims are ints or named symbols."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .dtypes import DType

# A dim is a static size (int) or a symbol (str) such as "batch"; a shape of None has unknown rank.
Dim = Union[int, str]
Shape = tuple  # tuple[Dim, ...]


@dataclass(frozen=True)
class TensorType:
    dtype: DType | None
    shape: Shape | None = None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def __str__(self) -> str:
        dt = str(self.dtype) if self.dtype is not None else "?"
        if self.shape is None:
            return f"{dt}[...]"
        return f"{dt}[{','.join(str(d) for d in self.shape)}]"


def format_shape(shape: Shape | None) -> str:
    if shape is None:
        return "[...]"
    return "[" + ",".join(str(d) for d in shape) + "]"


def broadcast_shapes(*shapes: Shape | None) -> Shape | None:
    """Numpy-style broadcast of shapes with symbolic dims; None if any rank is unknown.

    Raises ValueError when two static dims disagree.
    """
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for i in range(rank):
        dims = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
        static = {d for d in dims if isinstance(d, int) and d != 1}
        symbols = [d for d in dims if isinstance(d, str)]
        if len(static) > 1:
            raise ValueError(f"cannot broadcast shapes {[format_shape(s) for s in shapes]}")
        if static:
            out.append(static.pop())
        elif symbols:
            out.append(symbols[0] if len(set(symbols)) == 1 else f"?{id(symbols) % 10000}")
        else:
            out.append(1)
    return tuple(out)

"""Optimization profiles: the shape ranges (min/opt/max per input) an engine accepts.

As in TensorRT, an engine may carry several profiles; the GPU target tunes each profile's
Layers at its `opt` shapes, and a context runs any shape inside the selected profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..errors import ProfileError, ShapeOutOfProfileError
from .plan import IOTensor


@dataclass(frozen=True)
class ShapeRange:
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def contains(self, shape: Iterable[int]) -> bool:
        shape = tuple(shape)
        return len(shape) == len(self.min) and all(lo <= d <= hi for lo, d, hi in zip(self.min, shape, self.max))

    def __str__(self) -> str:
        return f"min {list(self.min)} opt {list(self.opt)} max {list(self.max)}"


@dataclass(frozen=True)
class OptimizationProfile:
    """Shape ranges by input name. Inputs not named have static shapes."""

    ranges: dict[str, ShapeRange]

    def contains(self, shapes: Mapping[str, Iterable[int]]) -> bool:
        return all(r.contains(shapes[n]) for n, r in self.ranges.items() if n in shapes)

    def opt_shapes(self, inputs: list[IOTensor] | None = None) -> dict[str, tuple[int, ...]]:
        """The `opt` shape of each ranged input (and, given `inputs`, the static shapes of the rest)."""
        out = {n: r.opt for n, r in self.ranges.items()}
        for s in inputs or ():
            if s.name not in out and s.type.shape is not None:
                out[s.name] = tuple(s.type.shape)
        return out

    def to_data(self) -> dict:
        return {n: {"min": list(r.min), "opt": list(r.opt), "max": list(r.max)} for n, r in self.ranges.items()}

    @staticmethod
    def from_data(data: Mapping[str, Any], inputs: list[IOTensor] | None = None, index: int = 0) -> "OptimizationProfile":
        """Validate a user's (or a manifest's) `{name: {"min", "opt", "max"}}` against the inputs."""
        if not isinstance(data, Mapping) or not data:
            raise ProfileError(f"profile {index} must be a non-empty dict {{input name: {{'min','opt','max'}}}}")
        specs = {s.name: s for s in inputs} if inputs is not None else None
        ranges = {}
        for name, r in data.items():
            if specs is not None and name not in specs:
                raise ProfileError(f"profile {index} names '{name}', which is not an input; inputs: {sorted(specs)}")
            try:
                lo, opt, hi = (tuple(int(d) for d in r[k]) for k in ("min", "opt", "max"))
            except (KeyError, TypeError, ValueError):
                raise ProfileError(f"profile {index}, input '{name}': give 'min', 'opt' and 'max' as tuples of ints, "
                                   f"e.g. {{'min': (1, 3, 224, 224), 'opt': (8, 3, 224, 224), 'max': (32, 3, 224, 224)}}") from None
            if not len(lo) == len(opt) == len(hi):
                raise ProfileError(f"profile {index}, input '{name}': min/opt/max have different ranks")
            if not all(0 <= a <= b <= c for a, b, c in zip(lo, opt, hi)):
                raise ProfileError(f"profile {index}, input '{name}': need 0 <= min <= opt <= max in every dim, "
                                   f"got min {list(lo)} opt {list(opt)} max {list(hi)}")
            declared = specs[name].type.shape if specs is not None else None
            if declared is not None:
                if len(declared) != len(lo):
                    raise ProfileError(f"profile {index}, input '{name}': rank {len(lo)}, the input is {specs[name].type}")
                for axis, (d, a, c) in enumerate(zip(declared, lo, hi)):
                    if isinstance(d, int) and not a == d == c:
                        raise ProfileError(f"profile {index}, input '{name}': dim {axis} is fixed at {d} in the model, "
                                           f"the profile ranges over {a}..{c}")
            ranges[name] = ShapeRange(lo, opt, hi)
        if specs is not None:
            for s in specs.values():
                if s.name not in ranges and (s.type.shape is None or not s.type.is_static):
                    raise ProfileError(f"profile {index} has no range for input '{s.name}' ({s.type}), whose shape is "
                                       "not static; give it min/opt/max")
        return OptimizationProfile(ranges)


def parse_profiles(profiles: Iterable[Mapping[str, Any]] | None, inputs: list[IOTensor]) -> list[OptimizationProfile]:
    """The builder's `profiles=` argument, validated against the model's inputs."""
    if profiles is None:
        return []
    if isinstance(profiles, Mapping):
        profiles = [profiles]
    out = [p if isinstance(p, OptimizationProfile) else OptimizationProfile.from_data(p, inputs, i)
           for i, p in enumerate(profiles)]
    if not out:
        raise ProfileError("profiles=[] gives no profile; leave it out or give at least one")
    return out


def select_profile(profiles: list[OptimizationProfile], shapes: Mapping[str, tuple[int, ...]],
                   only: int | None = None) -> int:
    """Index of the first profile (or the profile `only`) that contains `shapes`, else a typed error."""
    candidates = [only] if only is not None else range(len(profiles))
    for i in candidates:
        if profiles[i].contains(shapes):
            return i
    # Name the first input that no candidate accepts, with every candidate's range for it.
    for name, shape in shapes.items():
        ranges = [(i, profiles[i].ranges[name]) for i in candidates if name in profiles[i].ranges]
        if ranges and not any(r.contains(shape) for _, r in ranges):
            where = "; ".join(f"profile {i}: {r}" for i, r in ranges)
            which = f"the selected profile ({where})" if only is not None else f"every optimization profile ({where})"
            fix = ("select another profile with context.set_profile(), or " if only is not None else "") + \
                "rebuild with a profile whose range covers this shape"
            raise ShapeOutOfProfileError(name, shape, which, fix)
    raise ShapeOutOfProfileError(next(iter(shapes), "?"), next(iter(shapes.values()), ()),
                                 "any one profile for all inputs together",
                                 "feed shapes that one profile covers for every input at once")

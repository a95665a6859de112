import click
import pytest

from tensorsmith.cli.shapes import parse_shapes, profiles_from_options


def test_trtexec_syntax():
    assert parse_shapes("input:1x3x224x224,mask:1x128") == {"input": (1, 3, 224, 224), "mask": (1, 128)}


def test_names_with_colons_and_scalars():
    assert parse_shapes("ns:x:2X3,s:") == {"ns:x": (2, 3), "s": ()}


@pytest.mark.parametrize("bad", ["x", "x:1xq", ":1x2", "x:1,x:2", "x:-1"])
def test_malformed_shapes_are_rejected(bad):
    with pytest.raises(ValueError):
        parse_shapes(bad)


def test_a_profile_needs_min_opt_and_max():
    assert profiles_from_options({}, {"x": (2, 4)}, {}) is None
    p = profiles_from_options({"x": (1, 4)}, {"x": (2, 4)}, {"x": (8, 4)})
    assert p == [{"x": {"min": (1, 4), "opt": (2, 4), "max": (8, 4)}}]
    with pytest.raises(click.UsageError, match="--opt-shapes"):
        profiles_from_options({"x": (1, 4)}, {}, {"x": (8, 4)})

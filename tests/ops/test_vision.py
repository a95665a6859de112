"""Resize/Upsample, GridSample, AffineGrid, RoiAlign, DeformConv and Col2Im against onnxruntime:
every coordinate mode and nearest rule of Resize across opsets 10/11/13/18/19, integer and half
inputs, the legacy Upsample forms, and the shapes that inference gives."""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from tensorsmith.ir import DType, TensorType

from .test_nn import RNG, check_vs_ort, one_node, out_type, randn, run

F32 = np.float32


def _resize(x, attrs, opset=13, scales=None, sizes=None, roi=None, rtol=1e-5, atol=1e-5):
    consts = {"roi": np.array(roi or [], dtype=F32), "scales": np.array(scales or [], dtype=F32)}
    if sizes is not None:
        consts["sizes"] = np.array(sizes, dtype=np.int64)
    return check_vs_ort("Resize", {"x": x}, attrs, opset=opset, consts=consts, rtol=rtol, atol=atol)


COORD_MODES = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]


@pytest.mark.parametrize("coord", COORD_MODES)
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("scales", [[1, 1, 1.6, 2.5], [1, 1, 0.6, 0.75]])
def test_resize_modes_vs_ort(coord, mode, scales):
    # Scales that give whole output lengths: with a fractional scale * length, ONNX's reference
    # (which conformance follows, and so do we) and ONNX Runtime disagree on align_corners.
    _resize(randn(1, 2, 5, 4), {"mode": mode, "coordinate_transformation_mode": coord}, scales=scales, rtol=1e-4)


def test_resize_align_corners_fractional_length_follows_onnx_reference():
    x = randn(1, 1, 5, 4)
    consts = {"roi": np.array([], F32), "scales": np.array([1, 1, 1.7, 0.6], F32)}
    model = one_node("Resize", {"x": x}, {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
                     opset=13, consts=consts)
    (got,) = run(model, {"x": x})
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_resize_nearest_modes_with_sizes(nearest_mode):
    _resize(randn(1, 1, 4, 5), {"mode": "nearest", "nearest_mode": nearest_mode,
                                "coordinate_transformation_mode": "half_pixel"}, sizes=[1, 1, 7, 3])


def test_resize_cubic_exclude_outside_and_coeff():
    _resize(randn(1, 1, 5, 5), {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1},
            scales=[1, 1, 0.8, 1.6], rtol=1e-4)


def test_resize_tf_crop_and_resize_extrapolation():
    attrs = {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 7.0}
    _resize(randn(1, 1, 4, 4), attrs, sizes=[1, 1, 3, 5], roi=[0, 0, -0.2, 0.3, 1, 1, 0.8, 1.4])


def test_resize_opset10_and_opset11_forms():
    x = randn(1, 1, 3, 4)
    for mode in ("nearest", "linear"):
        check_vs_ort("Resize", {"x": x}, {"mode": mode}, opset=10,
                     consts={"scales": np.array([1, 1, 2.0, 1.5], F32)}, rtol=1e-5)
        check_vs_ort("Resize", {"x": x}, {"mode": mode}, opset=10,
                     consts={"scales": np.array([1, 1, 0.5, 0.6], F32)}, rtol=1e-5)
    # Resize-11: empty scales with sizes; tf_half_pixel_for_nn exists only there.
    _resize(x, {"mode": "nearest", "coordinate_transformation_mode": "tf_half_pixel_for_nn"}, opset=11,
            sizes=[1, 1, 5, 7], roi=[])


def test_resize_opset18_antialias_axes_and_aspect_policy():
    x = randn(1, 2, 9, 8)
    _resize(x, {"mode": "linear", "antialias": 1}, opset=18, scales=[1, 1, 0.45, 0.6], rtol=1e-4)
    _resize(x, {"mode": "cubic", "antialias": 1}, opset=18, scales=[1, 1, 0.5, 0.7], rtol=1e-4)
    _resize(x, {"mode": "linear", "axes": [3, 2]}, opset=18, scales=[1.5, 0.5])
    for policy in ("not_larger", "not_smaller"):
        _resize(x, {"mode": "nearest", "axes": [2, 3], "keep_aspect_ratio_policy": policy}, opset=18, sizes=[5, 6])


def test_resize_opset19_half_pixel_symmetric():
    _resize(randn(1, 1, 5, 4), {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"},
            opset=19, scales=[1, 1, 1.3, 0.7])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_integer_inputs(dtype, mode):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, (1, 1, 4, 4)).astype(dtype)
    (y,) = _resize(x, {"mode": mode}, scales=[1, 1, 1.5, 2.0], atol=1)  # ORT may round .5 either way
    assert y.dtype == dtype


def test_resize_float16():
    (y,) = _resize(randn(1, 1, 4, 4, dtype=np.float16), {"mode": "linear"}, scales=[1, 1, 2, 2], rtol=2e-3, atol=2e-3)
    assert y.dtype == np.float16


def test_resize_infer_static_and_symbolic():
    consts = {"roi": np.array([], F32), "scales": np.array([1, 1, 2, 0.5], F32)}
    model = one_node("Resize", {"x": randn(1, 3, 8, 8)}, {"mode": "nearest"}, opset=13, consts=consts,
                     shapes={"x": ["N", 3, 8, 8]})
    assert out_type(model) == TensorType(DType.FLOAT32, ("N", 3, 16, 4))


@pytest.mark.parametrize("opset", [7, 9])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_legacy_forms(opset, mode):
    x = randn(1, 1, 3, 4)
    scales = [1.0, 1.0, 2.0, 1.5]
    if opset == 7:
        check_vs_ort("Upsample", {"x": x}, {"mode": mode, "scales": scales}, opset=7)
    else:
        check_vs_ort("Upsample", {"x": x}, {"mode": mode}, opset=9, consts={"scales": np.array(scales, F32)})


# -- GridSample / AffineGrid ----------------------------------------------------------------


@pytest.mark.parametrize("opset,mode", [(16, "bilinear"), (16, "nearest"), (16, "bicubic"), (20, "linear"),
                                        (20, "cubic")])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_vs_ort(opset, mode, padding, align):
    grid = RNG.uniform(-1.3, 1.3, (2, 3, 4, 2)).astype(F32)
    check_vs_ort("GridSample", {"x": randn(2, 2, 4, 5), "grid": grid},
                 {"mode": mode, "padding_mode": padding, "align_corners": align}, opset=opset, rtol=1e-4, atol=1e-5)


def test_grid_sample_5d_and_infer():
    grid = RNG.uniform(-1.1, 1.1, (1, 2, 3, 2, 3)).astype(F32)
    check_vs_ort("GridSample", {"x": randn(1, 2, 3, 4, 5), "grid": grid}, {"mode": "linear"}, opset=20, rtol=1e-4)
    model = one_node("GridSample", {"x": randn(1, 2, 4, 5), "grid": randn(1, 6, 7, 2)}, opset=20,
                     shapes={"x": ["N", 2, 4, 5], "grid": ["N", 6, 7, 2]})
    assert out_type(model).shape == ("N", 2, 6, 7)


@pytest.mark.parametrize("size", [[2, 3, 4, 5], [1, 2, 3, 4, 5]])
@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_vs_ort(size, align):
    theta = randn(size[0], len(size) - 2, len(size) - 1)
    check_vs_ort("AffineGrid", {"theta": theta}, {"align_corners": align}, opset=20,
                 consts={"size": np.array(size, np.int64)}, rtol=1e-5, atol=1e-6)


# -- RoiAlign / DeformConv / Col2Im ---------------------------------------------------------

ROIS = np.array([[0.5, 1.0, 6.2, 5.5], [2.0, 0.0, 3.0, 1.0], [-1.0, 2.0, 7.5, 9.0]], F32)


@pytest.mark.parametrize("opset,attrs", [
    (10, {"output_height": 3, "output_width": 2, "sampling_ratio": 2, "spatial_scale": 0.9}),
    (10, {"output_height": 2, "output_width": 2}),
    (16, {"output_height": 3, "output_width": 3, "coordinate_transformation_mode": "half_pixel"}),
    (16, {"output_height": 2, "output_width": 3, "mode": "max", "sampling_ratio": 2}),
])
def test_roi_align_vs_ort(opset, attrs):
    inputs = {"x": randn(2, 3, 8, 7), "rois": ROIS, "bi": np.array([0, 1, 1], np.int64)}
    check_vs_ort("RoiAlign", inputs, attrs, opset=opset, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attrs,with_mask", [
    ({}, False), ({"pads": [1, 1, 1, 1], "strides": [2, 1], "dilations": [1, 2]}, True),
    ({"group": 2, "offset_group": 2, "pads": [0, 1, 0, 1]}, True),
])
def test_deform_conv_vs_ort(attrs, with_mask):
    x = randn(2, 4, 5, 6)
    w = randn(6, 4 // attrs.get("group", 1), 2, 3)
    ref = one_node("Conv", {"x": x}, {k: v for k, v in attrs.items() if k != "offset_group"}, opset=19,
                   consts={"w": w})
    oh, ow = run(ref, {"x": x})[0].shape[2:]
    og = attrs.get("offset_group", 1)
    inputs = {"x": x, "w": w, "offset": RNG.uniform(-2, 2, (2, og * 2 * 6, oh, ow)).astype(F32), "b": randn(6)}
    if with_mask:
        inputs["mask"] = RNG.uniform(0, 1, (2, og * 6, oh, ow)).astype(F32)
    model = one_node("DeformConv", inputs, attrs, opset=19)
    (got,) = run(model, inputs)
    (want,) = ReferenceEvaluator(model).run(None, inputs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attrs,image,block", [
    ({}, [4, 5], [2, 2]),
    ({"pads": [1, 0, 0, 1], "strides": [2, 1], "dilations": [1, 2]}, [5, 5], [2, 3]),
    ({"strides": [1, 2, 1]}, [3, 4, 3], [2, 2, 1]),
])
def test_col2im_vs_reference(attrs, image, block):
    nd = len(image)
    pads = attrs.get("pads", [0] * 2 * nd)
    dil = attrs.get("dilations", [1] * nd)
    strides = attrs.get("strides", [1] * nd)
    counts = [(image[i] + pads[i] + pads[nd + i] - (block[i] - 1) * dil[i] - 1) // strides[i] + 1 for i in range(nd)]
    cols = randn(2, 3 * int(np.prod(block)), int(np.prod(counts)))
    consts = {"image": np.array(image, np.int64), "block": np.array(block, np.int64)}
    model = one_node("Col2Im", {"cols": cols}, attrs, opset=18, consts=consts)
    (got,) = run(model, {"cols": cols})
    (want,) = ReferenceEvaluator(model).run(None, {"cols": cols})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert out_type(model) == TensorType(DType.FLOAT32, (2, 3, *image))

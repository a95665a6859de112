"""Element types, with their ONNX codes and torch/numpy equivalents."""

from __future__ import annotations

import enum

import numpy as np
import torch

from ..errors import UnsupportedDTypeError


class DType(enum.Enum):
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT64 = "float64"
    FLOAT8E4M3 = "float8e4m3fn"
    FLOAT8E4M3FNUZ = "float8e4m3fnuz"
    FLOAT8E5M2 = "float8e5m2"
    FLOAT8E5M2FNUZ = "float8e5m2fnuz"
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    UINT8 = "uint8"
    UINT16 = "uint16"
    UINT32 = "uint32"
    UINT64 = "uint64"
    BOOL = "bool"

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"DType.{self.name}"

    @property
    def torch(self) -> torch.dtype:
        return _TO_TORCH[self]

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_signed_int(self) -> bool:
        return self in (DType.INT8, DType.INT16, DType.INT32, DType.INT64)

    @property
    def is_unsigned_int(self) -> bool:
        return self in (DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64)

    @property
    def itemsize(self) -> int:
        return _TO_TORCH[self].itemsize

    @property
    def onnx(self) -> int:
        return _TO_ONNX[self]

    @staticmethod
    def from_torch(dtype: torch.dtype) -> "DType":
        try:
            return _FROM_TORCH[dtype]
        except KeyError:
            raise UnsupportedDTypeError(str(dtype), "a torch tensor") from None

    @staticmethod
    def from_numpy(dtype) -> "DType":
        dtype = np.dtype(dtype)
        try:
            return _FROM_NUMPY[dtype.name]
        except KeyError:
            raise UnsupportedDTypeError(str(dtype), "a numpy array") from None

    @staticmethod
    def from_onnx(code: int, where: str = "a tensor") -> "DType":
        try:
            return _FROM_ONNX[code]
        except KeyError:
            import onnx

            name = onnx.TensorProto.DataType.Name(code) if code in onnx.TensorProto.DataType.values() else str(code)
            raise UnsupportedDTypeError(name, where) from None


_FLOATS = {
    DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.FLOAT64,
    DType.FLOAT8E4M3, DType.FLOAT8E4M3FNUZ, DType.FLOAT8E5M2, DType.FLOAT8E5M2FNUZ,
}

_TO_TORCH = {
    DType.FLOAT32: torch.float32,
    DType.FLOAT16: torch.float16,
    DType.BFLOAT16: torch.bfloat16,
    DType.FLOAT64: torch.float64,
    DType.FLOAT8E4M3: torch.float8_e4m3fn,
    DType.FLOAT8E4M3FNUZ: torch.float8_e4m3fnuz,
    DType.FLOAT8E5M2: torch.float8_e5m2,
    DType.FLOAT8E5M2FNUZ: torch.float8_e5m2fnuz,
    DType.INT8: torch.int8,
    DType.INT16: torch.int16,
    DType.INT32: torch.int32,
    DType.INT64: torch.int64,
    DType.UINT8: torch.uint8,
    DType.UINT16: torch.uint16,
    DType.UINT32: torch.uint32,
    DType.UINT64: torch.uint64,
    DType.BOOL: torch.bool,
}
_FROM_TORCH = {v: k for k, v in _TO_TORCH.items()}

# ONNX TensorProto.DataType codes.
_TO_ONNX = {
    DType.FLOAT32: 1, DType.UINT8: 2, DType.INT8: 3, DType.UINT16: 4, DType.INT16: 5,
    DType.INT32: 6, DType.INT64: 7, DType.BOOL: 9, DType.FLOAT16: 10, DType.FLOAT64: 11,
    DType.UINT32: 12, DType.UINT64: 13, DType.BFLOAT16: 16, DType.FLOAT8E4M3: 17,
    DType.FLOAT8E4M3FNUZ: 18, DType.FLOAT8E5M2: 19, DType.FLOAT8E5M2FNUZ: 20,
}
_FROM_ONNX = {v: k for k, v in _TO_ONNX.items()}

_FROM_NUMPY = {
    "float32": DType.FLOAT32, "float16": DType.FLOAT16, "float64": DType.FLOAT64,
    "int8": DType.INT8, "int16": DType.INT16, "int32": DType.INT32, "int64": DType.INT64,
    "uint8": DType.UINT8, "uint16": DType.UINT16, "uint32": DType.UINT32, "uint64": DType.UINT64,
    "bool": DType.BOOL,
    # ml_dtypes names, which onnx uses for the types numpy lacks
    "bfloat16": DType.BFLOAT16, "float8_e4m3fn": DType.FLOAT8E4M3, "float8_e4m3fnuz": DType.FLOAT8E4M3FNUZ,
    "float8_e5m2": DType.FLOAT8E5M2, "float8_e5m2fnuz": DType.FLOAT8E5M2FNUZ,
}

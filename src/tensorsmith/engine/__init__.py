"""Engines as data: the plan (and, later, memory plan and engine file)."""

from .plan import IOTensor, Plan
from .report import LayerInfo, LayerReport, layer_report

__all__ = ["IOTensor", "LayerInfo", "LayerReport", "Plan", "layer_report"]

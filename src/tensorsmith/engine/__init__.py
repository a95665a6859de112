"""Engines as data: the plan (and, later, memory plan and engine file)."""

from .plan import IOTensor, LayerPlan, Plan
from .report import LayerInfo, LayerReport, layer_report

__all__ = ["IOTensor", "LayerPlan", "LayerInfo", "LayerReport", "Plan", "layer_report"]

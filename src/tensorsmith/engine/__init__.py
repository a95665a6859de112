"""Engines as data: the plan (and, later, memory plan and engine file)."""

from .plan import IOTensor, Plan

__all__ = ["IOTensor", "Plan"]

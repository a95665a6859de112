"""Triton kernels generated from templates plus configs (importing needs the triton package)."""

"""The root of gpuops's own exceptions: ``except GpuopsError`` catches any error gpuops raises."""

from __future__ import annotations


class GpuopsError(Exception):
    """An error of gpuops's own (the provider errors, the store's, a refused policy, …).

    It imports nothing of gpuops, so every layer (the providers too) may derive from it."""

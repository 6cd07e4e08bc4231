"""The gpuops test suite."""

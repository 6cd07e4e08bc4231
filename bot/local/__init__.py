"""Tools shipped for trying and testing gpuops locally; never imported by production code."""

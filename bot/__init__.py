"""gpuops core: configuration, policy, workflow, store, providers, rendering."""

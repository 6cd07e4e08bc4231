"""Lumen, a provider that exists only in the tests: its descriptor, client, adapter and
simulator, registered through the ``gpuops.providers`` entry point group like any
installed package's provider, to prove that a provider is one folder."""

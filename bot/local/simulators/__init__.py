"""Together and E2E provider simulators: real HTTP servers with fault injection."""

"""Provider clients (Together, E2E) behind one adapter interface."""

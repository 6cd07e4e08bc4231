"""The MCP surface (SPEC §15): gpuops's tools for agents over the Model Context Protocol,
beside the Slack surface, on the official ``mcp`` SDK. It reaches the core through its
front door (``bot.core.api``) and knows nothing of Slack."""

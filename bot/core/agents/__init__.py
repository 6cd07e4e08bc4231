"""Agents through the front door (SPEC §15): personal tokens (``tokens``) and what an agent
may ask of gpuops (``desk``), chat-neutral. The MCP surface (``bot.mcp``) renders it."""

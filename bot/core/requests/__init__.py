"""bot.core.requests."""

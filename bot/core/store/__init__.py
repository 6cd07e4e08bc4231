"""bot.core.store."""

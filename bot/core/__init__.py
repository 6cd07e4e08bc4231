"""bot.core."""

"""bot.local."""

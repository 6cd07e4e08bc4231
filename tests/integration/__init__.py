"""Integration tests over real HTTP: the bot, the Slack stand-in and the simulators on 127.0.0.1."""

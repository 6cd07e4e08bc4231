"""`gpuops demo`: simulators, the Slack stand-in and the bot, driven from a terminal chat."""

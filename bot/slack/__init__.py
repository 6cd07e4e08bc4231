"""The Slack layer: Bolt wiring, Block Kit rendering, Web API calls, the core's notifier."""

"""Block Kit rendering, a module per surface: primitives (escaping, mentions, blocks, the
message), clusters, requests, forms (the modals and their callback ids), answers (a core
Reply as Slack shows it) and watch (what the watcher posts)."""

"""Slack Workflow Builder steps (SPEC §11), apart from the change workflow they ask of: a step
is started (``start``), run once into the request a command would make (``runner``), and
ended exactly once when that request ends (``completer``)."""

"""The load benchmark (``make bench``): gpuops serve under signed slash commands, next to a
bare Bolt app that only acks, with the provider simulators and the fake Slack in the driver.

Modules: ``bare_bolt`` (the baseline app), ``procs`` (subprocesses, readiness, RSS),
``load`` (senders, outcome tracking, one concurrency level), ``report`` (statistics,
targets, table, JSON, plot), ``postgres`` (the bench's own database, replicas, the
server's figures) with ``pg_report`` (their targets and table), and ``run`` (the command
line entry point).
"""

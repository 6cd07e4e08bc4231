"""Lifecycle tables beside the change request's (``bot.core.requests.table``): a
posted remediation's decision (``remediations``) and a Workflow Builder step
(``builder_steps``), each a table of named transitions, drawn by ``mermaid()``, and the only
code that writes those states."""

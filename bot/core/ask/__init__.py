"""What people ask of gpuops, read and checked once: the command grammar, change forms, and
the ``ChangeAsk`` every change (a command, a form, a Workflow Builder step, a revert) becomes
before the change workflow takes it."""

"""The retry topology: model, file, mapping, checks, naming, ``compat`` presets, input lane, ACLs."""

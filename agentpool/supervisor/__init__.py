"""The supervisor: one worker process per owned node, fed by shared watches."""

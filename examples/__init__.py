"""Example agents and the two ends of the pipe (a webhook adapter, a delivery worker)."""

"""overlapd's Python client (client/python/README.md)."""
from overlapd.client import FINAL_STATES, Client, OverlapdError, default_address

__all__ = ["Client", "OverlapdError", "FINAL_STATES", "default_address"]

"""HTTP routes, one module per resource; each exposes ``router``."""

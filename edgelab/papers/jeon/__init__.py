"""jeon."""

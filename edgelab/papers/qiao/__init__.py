"""qiao."""

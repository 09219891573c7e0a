"""hierarchy."""

"""Experiment drivers: one module per paper experiment, called by its notebook."""

"""Figures and tables, one function per catalog id, in a shared style."""

"""Compatibility shims that let scripts written for other planners run on pipesim unchanged."""

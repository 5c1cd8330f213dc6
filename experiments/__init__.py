"""Paper-style experiments: one script per experiment, see experiments/README.md.

A package so that the tests can import each script's ``run`` (``from experiments import
planner_speedup``); the scripts themselves run as ``python experiments/NAME.py``.
"""

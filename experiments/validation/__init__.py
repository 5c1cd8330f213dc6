"""Validation against published measurements: each module here holds records of one topic.

A module is discovered by name (every module of this package except ``record``) and exposes
``records() -> list[Record]``. ``python -m experiments.validation`` prints published against
predicted with the relative error and exits 1 when a record misses its tolerance;
``tests/experiments/test_validation.py`` holds every record to its tolerance.
"""

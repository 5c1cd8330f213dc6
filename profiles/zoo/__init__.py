"""Analytic model zoo."""

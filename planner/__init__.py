"""planner layer."""

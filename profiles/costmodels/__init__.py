"""Cost models shared by the planner and the simulator: compute re-targeting, memory, collectives,
and the sequence-length cost model."""

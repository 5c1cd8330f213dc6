"""schedules layer."""

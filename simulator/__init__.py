"""simulator layer."""

"""The PyTorch profiler: measure a user's model block by block (needs the ``torch`` extra)."""

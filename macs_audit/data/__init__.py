"""Data sources, the released corrupted layouts, batching and splits."""

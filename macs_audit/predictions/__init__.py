"""Predictions a classifier already computed: read from files (`files.py`), written by `evaluate
--save-predictions`, and audited without the model (`audit.py`). Nothing here imports torch."""

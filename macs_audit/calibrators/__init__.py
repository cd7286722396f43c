"""Post-hoc calibrators: maps fitted on held-out logits that make confidences honest."""

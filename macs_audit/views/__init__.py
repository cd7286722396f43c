"""Views: what the model is scored on (clean images, a perturbation, a corruption at a severity)."""

"""MaCS fine-tuning: options, losses, the flat loop, and the run the CLI calls.

Submodules that need torch import it themselves; this package does not.
"""

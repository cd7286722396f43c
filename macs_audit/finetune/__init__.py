"""Fine-tuning a miscalibrated model with MaCS (or a baseline objective), proven by the audit.

options (the hyperparameters), losses (MaCS and the baselines), loop (the flat training loop) and run
(`finetune` from files to files, its before/after audit from macs_audit.before_after, which
`calibrate` shares). Modules that need torch import it themselves; this package does not.
"""

"""Fixing a miscalibrated model: MaCS fine-tuning and temperature scaling, each proven by the audit.

options (the hyperparameters), losses (MaCS and the baselines), loop (the flat training loop),
run (`finetune` and `export` from files to files), calibrate (`calibrate` from files to files) and
audits (the before/after audit both write). Modules that need torch import it themselves; this
package does not.
"""

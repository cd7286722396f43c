"""macs-audit: audit image classifiers for calibration and robustness, and fix them."""

__version__ = "0.1.0"

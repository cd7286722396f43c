"""The perturbation views' names and strengths (torch-free: parsers, the report and the gate read them)."""

# The fixed evaluation views (docs/method.md §2: CIFAR-C severity-3 strengths, seed 0).
EVAL_BLUR_SIGMA = 0.7
EVAL_NOISE_SIGMA = 0.08
EVAL_VIEWS = ("noise", "blur", "noise+blur")
ROBUST_VIEW = "noise+blur"
# MaCS training view defaults [ours]: per-sample blur sigma ~ U[0.3, 0.8], then noise sigma ~ U[0.01, 0.05].
TRAIN_BLUR_RANGE = (0.3, 0.8)
TRAIN_NOISE_RANGE = (0.01, 0.05)


def describe() -> dict[str, str]:
    """What the report records about the perturbation views."""
    return {
        "noise": f"Gaussian noise sigma {EVAL_NOISE_SIGMA} in [0,1] pixel space, clamped",
        "blur": f"Gaussian blur sigma {EVAL_BLUR_SIGMA} (radius int(4 sigma + 0.5), edges replicated)",
        "noise+blur": f"blur sigma {EVAL_BLUR_SIGMA} then noise sigma {EVAL_NOISE_SIGMA}",
        "robust_accuracy_view": ROBUST_VIEW,
    }

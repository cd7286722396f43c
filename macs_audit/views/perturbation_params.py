"""The perturbation views' names and strengths (torch-free: parsers, the report and the gate read them)."""

from macs_audit.report import DEFAULT_ROBUST_VIEW

# The fixed evaluation views (docs/method.md §2: CIFAR-C severity-3 strengths, seed 0). The blur is a
# length: EVAL_BLUR_SIGMA pixels at EVAL_REFERENCE_SIDE, scaled with the images' shorter side
# (eval_blur_sigma); the noise is per pixel and stays.
EVAL_BLUR_SIGMA = 0.7
EVAL_REFERENCE_SIDE = 32
EVAL_NOISE_SIGMA = 0.08
EVAL_VIEWS = ("noise", "blur", "noise+blur")
ROBUST_VIEW = DEFAULT_ROBUST_VIEW  # the view robustness.robust_accuracy is measured on (the Report says which)
# MaCS training view defaults [ours]: per-sample blur sigma ~ U[0.3, 0.8] pixels at EVAL_REFERENCE_SIDE (scaled with
# the shorter side, as the evaluation blur), then noise sigma ~ U[0.01, 0.05].
TRAIN_BLUR_RANGE: tuple[float, float] = (0.3, 0.8)
TRAIN_NOISE_RANGE: tuple[float, float] = (0.01, 0.05)


def eval_blur_sigma(height: int, width: int) -> float:
    """The evaluation views' blur sigma in pixels for height x width images: 0.7 at 32x32."""
    return EVAL_BLUR_SIGMA * min(height, width) / EVAL_REFERENCE_SIDE


def describe(height: int, width: int) -> dict[str, str]:
    """What the report records about the perturbation views on height x width images."""
    blur = f"{eval_blur_sigma(height, width):.4g}"
    scaled = f"{EVAL_BLUR_SIGMA} x shorter side / {EVAL_REFERENCE_SIDE}, at {height}x{width}"
    return {
        "noise": f"Gaussian noise sigma {EVAL_NOISE_SIGMA} in [0,1] pixel space, clamped",
        "blur": f"Gaussian blur sigma {blur} px ({scaled}; radius int(4 sigma + 0.5), edges replicated)",
        "noise+blur": f"blur sigma {blur} px ({scaled}) then noise sigma {EVAL_NOISE_SIGMA}",
        "robust_accuracy_view": ROBUST_VIEW,
    }

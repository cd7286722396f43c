"""AlexNet's errors on ImageNet-C: the normaliser of the benchmark's CE and mCE (Hendrycks and Dietterich, 2019).

The per-severity top-1 errors are the table the ImageNet-C README published for normalising mCE (each a
multiple of 1/50,000: the 50,000 validation images of a severity). The repository publishes no clean error
for that AlexNet; the clean error used for relative CE is torchvision's documented top-1 accuracy of its
AlexNet weights, 56.522%, which may not be the exact weights behind the table (CLEAN_ERROR_SOURCE says so
wherever it is used).
"""

from __future__ import annotations

# corruption -> errors at severities 1..5
ERRORS: dict[str, tuple[float, float, float, float, float]] = {
    "gaussian_noise": (0.69528, 0.82542, 0.93554, 0.98138, 0.99452),
    "shot_noise": (0.71224, 0.85108, 0.93574, 0.98182, 0.99146),
    "impulse_noise": (0.78374, 0.89808, 0.94870, 0.98720, 0.99548),
    "defocus_blur": (0.65624, 0.73202, 0.85036, 0.91364, 0.94714),
    "glass_blur": (0.64308, 0.75054, 0.88806, 0.91622, 0.93344),
    "motion_blur": (0.58430, 0.70048, 0.82108, 0.89750, 0.92638),
    "zoom_blur": (0.70008, 0.76992, 0.80784, 0.84198, 0.87198),
    "snow": (0.71726, 0.88392, 0.86468, 0.91870, 0.94952),
    "frost": (0.61390, 0.79734, 0.88790, 0.89942, 0.93430),
    "fog": (0.67474, 0.76050, 0.84378, 0.87260, 0.94500),
    "brightness": (0.45140, 0.48502, 0.54048, 0.62166, 0.72440),
    "contrast": (0.64548, 0.76150, 0.88874, 0.97760, 0.99270),
    "elastic_transform": (0.52596, 0.70116, 0.55686, 0.64076, 0.80554),
    "pixelate": (0.52218, 0.54620, 0.73728, 0.87092, 0.91262),
    "jpeg_compression": (0.51002, 0.54718, 0.57294, 0.65458, 0.74778),
    "speckle_noise": (0.66192, 0.74440, 0.90246, 0.94548, 0.97268),
    "gaussian_blur": (0.54732, 0.70444, 0.82574, 0.89864, 0.95940),
    "spatter": (0.47196, 0.62194, 0.75052, 0.84132, 0.90182),
    "saturate": (0.59342, 0.65514, 0.51174, 0.70834, 0.82260),
}
CLEAN_ERROR = 1 - 0.56522
CLEAN_ERROR_SOURCE = (
    "torchvision's documented AlexNet top-1 accuracy 56.522% (the table's own clean error is unpublished)"
)
NAME = "AlexNet (ImageNet-C README table)"


def errors_by_cell() -> dict[tuple[str, int], float]:
    """(corruption, severity) -> AlexNet's error, the form corruption_summary.baseline_errors takes."""
    return {(name, s + 1): error for name, row in ERRORS.items() for s, error in enumerate(row)}

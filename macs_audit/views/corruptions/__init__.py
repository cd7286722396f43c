"""The 19 corruptions of CIFAR-C, Tiny-ImageNet-C and ImageNet-C at severities 1-5 as batched torch
code (docs/corruptions.md).

``table`` holds the names, families and the three parameter sets without importing torch; ``apply`` has the
entry points ``corrupt`` and ``batch_seed``; ``weather.frost_texture_info`` says which frost
textures were used. The operations live by family in ``noise``, ``blur``, ``weather``,
``spatter``, ``digital`` and ``jpeg``, on the shared ``ops`` and ``randomness``.
"""

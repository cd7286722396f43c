"""The 19 CIFAR-C corruptions at severities 1-5 as batched torch code (docs/corruptions.md).

``table`` holds the names, families and parameters without importing torch; ``apply`` has the
entry points ``corrupt`` and ``batch_seed``; ``weather.frost_texture_info`` says which frost
textures were used. The operations live by family in ``noise``, ``blur``, ``weather``,
``spatter``, ``digital`` and ``jpeg``, on the shared ``ops`` and ``randomness``.
"""

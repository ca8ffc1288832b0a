"""Below the engine: the kernels a linear layer runs (the few-rows kernel's C++ in ``cpp/``), the forms a model's
layers are settled into and kept per machine, the device's clock, native dtypes and memory read bandwidth.

Knows nothing of decoding: the engine runs its models through these forms, and imports this layer, never the
reverse. Imports torch, never pytest nor the rest of the package but :mod:`pytest_specbench.atomic`.
"""

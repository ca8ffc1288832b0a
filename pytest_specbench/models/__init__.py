"""The model layer: load targets and drafts by name (hub id, local folder, GGUF, embedded).

Imports nothing from the pytest side. ``base`` is torch-free, so the
plugin can validate options against it without loading torch.
"""

"""Model backends. Import submodules lazily: torch and onnxruntime are heavy."""

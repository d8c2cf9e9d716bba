"""The C++ CEL engine: an adapter over cel-expr-python (Google's C++ runtime) that adds
Kubernetes' libraries and rewrites or rejects what the runtime would answer differently from
cel-go.
"""

"""The pure-Python CEL engine: cel-python's Lark grammar, our own type checker and evaluator.

Portable (no native code beyond RE2); selected by ``--cel-engine python`` or when the C++
runtime has no wheel for this platform.
"""

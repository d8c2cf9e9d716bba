"""Placement quality: how prioritize's ``compact`` policy ranks the nodes that fit.

``profiles`` reads a node's devices once per inventory into physical units (a counter set
and the partitions drawing on it, or a device of its own) and topology domains (the values of
``numaNode``/``pcieRoot``-like attributes); ``compact`` ranks a node's allocation by what it
breaks of those (docs/scheduling-policy.md).
"""

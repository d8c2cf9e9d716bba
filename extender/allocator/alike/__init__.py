"""What the allocator need not work out twice: a node's gathered pools, kept across requests
until the slices change (gathered.py), and one search's answer for every node alike
(shapes.py), whose results are built only when read (results.py)."""

from extender.allocator.alike.gathered import GatheredPools, NodePools
from extender.allocator.alike.results import AlikeResults, takes_of
from extender.allocator.alike.shapes import Answer, NodeShape, Searched, ShapeMemo

__all__ = [
    "AlikeResults", "Answer", "GatheredPools", "NodePools", "NodeShape", "Searched", "ShapeMemo", "takes_of",
]

"""Preemption for devices: which pods must go for a pod's claims to fit (``victims``), and the
devices held for a pod a preemption nominated to a node until it is bound (``nominated``)."""

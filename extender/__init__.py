"""dra-extender: a kube-scheduler extender for Dynamic Resource Allocation (resource.k8s.io/v1)."""

__version__ = "0.1.0"

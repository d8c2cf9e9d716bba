"""dra-extender: a kube-scheduler extender for Dynamic Resource Allocation (resource.k8s.io/v1)."""

import importlib.metadata

try:
    __version__ = importlib.metadata.version("dra-extender")
except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
    __version__ = "unknown"

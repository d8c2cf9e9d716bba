"""The HTTP surface of the extender (kube-scheduler extender/v1 verbs, health, metrics, debug)."""

from extender.api.routes import create_app

__all__ = ["create_app"]

"""Where the cluster state comes from: a Kubernetes watch (``kube``) or manifests (``local``)."""
